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

// Lone surrogates now and then: canonicalize refuses them, and so must the envelope.
const words = fc.oneof({ weight: 9, arbitrary: fc.string({ unit: 'grapheme', maxLength: 12 }) }, { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 4 }) })

/** What a rule gave: its value, or the message it threw. */
function outcome(rule: (input: FingerprintInput) => string, input: FingerprintInput): string {
  try {
    return rule(input)
  } catch (error) {
    return `threw ${(error as Error).message}`
  }
}
const inputs: fc.Arbitrary<FingerprintInput> = fc.record(
  {
    method: fc.constantFrom('POST', 'post', 'PATCH', 'Put'),
    route: fc.oneof(fc.constantFrom('/v1/charges', '/v1/charges/:id', '/v1/\ud83d\udcb3'), words),
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
        expect(outcome(currentFingerprint, input)).toBe(outcome(wholeCanonicalized, input))
      }),
      { numRuns: 2000 },
    )
  })

  it('keeps the values canonicalize refuses refused, the ones it writes as undefined written so, and an array where a record belongs an array', () => {
    expect(() => currentFingerprint({ method: 'POST', route: '/r', body: { amount: Number.NaN } })).toThrow(/NaN/)
    expect(() => currentFingerprint({ method: 'POST', route: '/r', params: { id: '\ud800' } })).toThrow(/surrogate/)
    expect(() => currentFingerprint({ method: 'POST', route: '/r\udc00' })).toThrow(/surrogate/)
    const odd: FingerprintInput = { method: 'POST', route: '/r', body: () => 1 }
    expect(currentFingerprint(odd)).toBe(wholeCanonicalized(odd))
    // From JavaScript, an empty array where a record belongs is canonicalized as one, not as `{}`.
    const arrays = { method: 'POST', route: '/r', params: [] as unknown as Record<string, string> }
    expect(currentFingerprint(arrays)).toBe(wholeCanonicalized(arrays))
  })
})
