import { createHash } from 'node:crypto'
import canonicalize from 'canonicalize'
import { describe, expect, it } from 'vitest'
import { currentFingerprint, fingerprintRequest, fingerprintsMatch, pickQuery, type FingerprintInput } from '../../src/index.js'
import { storedFingerprint } from '../../src/engine/fingerprint.js'

// The fingerprint's rules, no SQL (issue 13: the mutants these kill survived the rest of the
// suite). A stored fingerprint outlives the release that made it, so each rule is pinned to the
// exact bytes it hashes: a change to any of them turns keys in flight into 422s.
const sha = (value: unknown) => createHash('sha256').update(canonicalize(value) ?? '').digest('hex')
const base = { method: 'POST', route: '/v1/charges' }
const parts = (input: FingerprintInput) => {
  const [v2, v1] = fingerprintRequest(input).split(';') as [string, string]
  return { v2: v2.slice(3), v1: v1.slice(3) }
}
const common = { method: 'POST', route: '/v1/charges', params: {}, query: {} }

describe('what each rule hashes', () => {
  it('a JSON body: v2 tags it as json, v1 hashes it as it is', () => {
    const body = { amount: 1, currency: 'usd' }
    expect(parts({ ...base, body })).toEqual({ v2: sha({ v: 2, ...common, body: { kind: 'json', value: body } }), v1: sha({ ...common, body }) })
  })

  it('no body: v2 says none, v1 hashed it as a JSON null', () => {
    expect(parts(base)).toEqual({ v2: sha({ v: 2, ...common, body: { kind: 'none' } }), v1: sha({ ...common, body: null }) })
  })

  it('bytes: v2 tags them with the media type essence (or null), v1 hashed their base64 under `bytes`', () => {
    const body = Buffer.from('hi')
    expect(parts({ ...base, body })).toEqual({
      v2: sha({ v: 2, ...common, body: { kind: 'bytes', mediaType: null, base64: 'aGk=' } }),
      v1: sha({ ...common, body: { bytes: 'aGk=' } }),
    })
    expect(parts({ ...base, body, mediaType: ' Image/PNG ; q=1' }).v2).toBe(sha({ v: 2, ...common, body: { kind: 'bytes', mediaType: 'image/png', base64: 'aGk=' } }))
  })

  it('a text body under a non-JSON media type is text; under JSON, +json or no media type it is a JSON string', () => {
    expect(parts({ ...base, body: 'hi', mediaType: 'text/plain; charset=utf-8' }).v2).toBe(sha({ v: 2, ...common, body: { kind: 'text', mediaType: 'text/plain', text: 'hi' } }))
    const jsonString = sha({ v: 2, ...common, body: { kind: 'json', value: 'hi' } })
    expect(parts({ ...base, body: 'hi' }).v2).toBe(jsonString)
    expect(parts({ ...base, body: 'hi', mediaType: 'application/json' }).v2).toBe(jsonString)
    expect(parts({ ...base, body: 'hi', mediaType: 'application/problem+json; charset=utf-8' }).v2).toBe(jsonString)
    expect(parts({ ...base, body: 'hi', mediaType: 'application/jsonx' }).v2).not.toBe(jsonString)
  })

  it('the method in upper case, the route, path parameters and the chosen query; none given is empty', () => {
    const input = { method: 'post', route: '/v1/charges/:id', params: { id: 'ch_1' }, query: { expand: ['a', 'b'] }, body: 1 }
    const hashed = { method: 'POST', route: '/v1/charges/:id', params: { id: 'ch_1' }, query: { expand: ['a', 'b'] } }
    expect(parts(input)).toEqual({ v2: sha({ v: 2, ...hashed, body: { kind: 'json', value: 1 } }), v1: sha({ ...hashed, body: 1 }) })
    expect(fingerprintRequest({ ...base, params: {}, query: {} })).toBe(fingerprintRequest(base))
  })
})

describe('currentFingerprint', () => {
  it('is the current rule’s part of fingerprintRequest, for every kind of body', () => {
    for (const input of [base, { ...base, body: { amount: 1 } }, { ...base, body: Buffer.from('hi'), mediaType: 'image/png' }, { ...base, body: 'hi', mediaType: 'text/plain' }, { ...base, params: { id: '7' }, query: { a: ['1', '2'] } }]) {
      expect(fingerprintRequest(input).split(';')[0]).toBe(currentFingerprint(input))
    }
  })
})

describe('storedFingerprint', () => {
  it('keeps only the current rule of a versioned value, and a custom value whole', () => {
    const value = fingerprintRequest({ ...base, body: 1 })
    expect(storedFingerprint(value)).toBe(value.split(';')[0])
    expect(storedFingerprint('custom;value')).toBe('custom;value')
    // One part that is not a versioned hash makes the whole value custom.
    const half = `${value.split(';')[0]};custom`
    expect(storedFingerprint(half)).toBe(half)
  })
})

describe('fingerprintsMatch', () => {
  const request = fingerprintRequest({ ...base, body: { amount: 1 } })
  const [v2, v1] = request.split(';') as [string, string]

  it('compares by the rule the stored value names, and by no other', () => {
    expect(fingerprintsMatch(v2, request)).toBe(true)
    expect(fingerprintsMatch(v1, request)).toBe(true)
    expect(fingerprintsMatch(v1.slice(3), request)).toBe(true)
    // The v1 hash stored as if it were v2, or under a rule the request does not carry, matches nothing.
    expect(fingerprintsMatch(`v2:${v1.slice(3)}`, request)).toBe(false)
    expect(fingerprintsMatch(`v3:${v2.slice(3)}`, request)).toBe(false)
  })

  it('a custom value on either side compares as a plain string', () => {
    expect(fingerprintsMatch('not-a-hash', request)).toBe(false)
    expect(fingerprintsMatch(v2, 'custom')).toBe(false)
    expect(fingerprintsMatch(v2, `${request};custom`)).toBe(false)
    expect(fingerprintsMatch('same', 'same')).toBe(true)
  })

  it('a versioned part is exactly v<number>:<64 hex>: a custom value that only contains one is a plain string', () => {
    expect(fingerprintsMatch(v2, `x${v2}`)).toBe(false)
    expect(fingerprintsMatch(v2, `${v2}00`)).toBe(false)
    expect(fingerprintsMatch(v2, `${v2};x${v1}`)).toBe(false)
  })

  it('a rule numbered past 9, from a later release, is compared by its own hash', () => {
    const hash = v2.slice(3)
    expect(fingerprintsMatch(`v12:${hash}`, `v12:${hash};${v2}`)).toBe(true)
    expect(fingerprintsMatch(v2, `v12:${'0'.repeat(64)};${v2}`)).toBe(true)
  })
})

describe('pickQuery', () => {
  it('keeps only the named parameters that are present, lists included', () => {
    expect(pickQuery({ amount: '1', utm: 'x', tags: ['a', 'b'], gone: undefined }, ['amount', 'tags', 'gone', 'absent'])).toEqual({ amount: '1', tags: ['a', 'b'] })
    expect(Object.keys(pickQuery({ gone: undefined }, ['gone']))).toEqual([])
  })
})
