import { hash } from 'node:crypto'
import canonicalize from 'canonicalize'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { currentFingerprint, type FingerprintInput } from '../../src/index.js'

// Issue 21: the current fingerprint's envelope is written by hand and only its parts are
// canonicalized. It must be what canonicalizing the whole gave, byte for byte: a stored key whose
// fingerprint changed would answer its own retry 422.

/** The rule as it was written before: the whole input canonicalized in one call. */
function wholeCanonicalized(input: FingerprintInput): string {
  const essence = input.mediaType === undefined ? undefined : input.mediaType.split(';')[0]?.trim().toLowerCase()
  const { body } = input
  const tagged =
    body === undefined
      ? { kind: 'none' }
      : body instanceof Uint8Array
        ? { kind: 'bytes', mediaType: essence ?? null, base64: Buffer.from(body).toString('base64') }
        : typeof body === 'string' && essence !== undefined && essence !== 'application/json' && !essence.endsWith('+json')
          ? { kind: 'text', mediaType: essence, text: body }
          : { kind: 'json', value: body }
  const text = canonicalize({ v: 2, method: input.method.toUpperCase(), route: input.route, params: input.params ?? {}, query: input.query ?? {}, body: tagged })
  return `v2:${hash('sha256', text as string, 'hex')}`
}

const words = fc.string({ unit: 'grapheme', maxLength: 12 })
const inputs: fc.Arbitrary<FingerprintInput> = fc.record(
  {
    method: fc.constantFrom('POST', 'post', 'PATCH', 'Put'),
    route: fc.oneof(fc.constantFrom('/v1/charges', '/v1/charges/:id'), words),
    params: fc.dictionary(words, words, { maxKeys: 3 }),
    query: fc.dictionary(words, fc.oneof(words, fc.array(words, { maxLength: 3 })), { maxKeys: 3 }),
    body: fc.oneof(fc.jsonValue(), words, fc.uint8Array({ maxLength: 16 }), fc.constant(undefined)),
    mediaType: fc.constantFrom('application/json', 'Application/JSON; charset=utf-8', 'application/merge-patch+json', 'text/plain', 'text/csv; charset=latin1', 'image/png'),
  },
  { requiredKeys: ['method', 'route'] },
)

describe('the current fingerprint', () => {
  it('is the SHA-256 of the whole input canonicalized in one call, for any request', () => {
    fc.assert(
      fc.property(inputs, (input) => {
        expect(currentFingerprint(input)).toBe(wholeCanonicalized(input))
      }),
      { numRuns: 2000 },
    )
  })

  it('keeps the values canonicalize refuses refused, and the ones it writes as undefined written so', () => {
    expect(() => currentFingerprint({ method: 'POST', route: '/r', body: { amount: Number.NaN } })).toThrow(/NaN/)
    expect(() => currentFingerprint({ method: 'POST', route: '/r', params: { id: '\ud800' } })).toThrow(/surrogate/)
    const odd: FingerprintInput = { method: 'POST', route: '/r', body: () => 1 }
    expect(currentFingerprint(odd)).toBe(wholeCanonicalized(odd))
  })
})
