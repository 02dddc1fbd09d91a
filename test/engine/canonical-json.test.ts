import canonicalize from 'canonicalize'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { canonicalJson } from '../../src/engine/canonical-json.js'

// Issue 21: the fingerprint writes a parsed body's canonical JSON in a pass of its own and hands
// anything else to canonicalize. The two must agree byte for byte (a stored key whose fingerprint
// changed would answer its own retry 422), and canonicalize's refusals must stay refusals.

/** What the fingerprint writes for `value`: the fast pass, else canonicalize; or what it threw. */
function asFingerprinted(value: unknown): string | undefined {
  try {
    return canonicalJson(value) ?? canonicalize(value)
  } catch (error) {
    return `threw ${(error as Error).message}`
  }
}

function asCanonicalized(value: unknown): string | undefined {
  try {
    return canonicalize(value)
  } catch (error) {
    return `threw ${(error as Error).message}`
  }
}

const SURROGATE = /[\ud800-\udfff]/

/** Strings of every kind: plain, escaped (quotes, backslashes, controls), and surrogates, lone ones too. */
const strings = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  fc.string({ unit: fc.constantFrom('"', '\\', '\n', '\u0000', '\u001f', '\u007f', '\u2028', 'é', 'a', '\ud83d', '\udcb3'), maxLength: 8 }),
  fc.string({ unit: 'binary', maxLength: 6 }),
)
const numbers = fc.oneof(fc.double(), fc.integer(), fc.constantFrom(0, -0, 1e21, 1e-7, 5e-324, Number.MAX_SAFE_INTEGER + 2, Number.NaN, Infinity, -Infinity))

/** JSON-shaped values with strings and numbers of every kind, and now and then what JSON has not. */
const { value } = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    strings,
    numbers,
    fc.boolean(),
    fc.constant(null),
    fc.constantFrom(undefined, Symbol('s'), () => 1, 10n, new Date(0), { toJSON: () => 'replaced' }, new Map([[1, 2]]), new Uint8Array([1, 2])),
    fc.array(tie('value'), { maxLength: 5 }),
    fc.sparseArray(tie('value'), { maxLength: 4 }),
    fc.dictionary(strings, tie('value'), { maxKeys: 5 }),
  ),
}))

describe('canonicalJson', () => {
  it('writes what canonicalize writes, and refuses what it refuses, for any value', () => {
    fc.assert(
      fc.property(value, (v) => {
        expect(asFingerprinted(v)).toBe(asCanonicalized(v))
      }),
      { numRuns: 3000 },
    )
  })

  it('writes every parsed JSON value itself, but for strings with surrogates', () => {
    // Without this, a pass that handed everything to canonicalize would pass the test above.
    fc.assert(
      fc.property(fc.jsonValue(), (v) => {
        const text = JSON.stringify(v)
        fc.pre(!SURROGATE.test(text))
        expect(canonicalJson(v)).toBe(canonicalize(v))
      }),
      { numRuns: 2000 },
    )
  })

  it('leaves a cycle, and nesting past its depth, to canonicalize', () => {
    const cyclic: Record<string, unknown> = { a: 1 }
    cyclic.self = cyclic
    expect(canonicalJson(cyclic)).toBeUndefined()
    expect(asFingerprinted(cyclic)).toBe('threw Circular reference detected')
    let deep: unknown = 'bottom'
    for (let i = 0; i < 300; i++) deep = i % 2 === 0 ? [deep] : { k: deep }
    expect(canonicalJson(deep)).toBeUndefined()
    expect(asFingerprinted(deep)).toBe(canonicalize(deep))
  })
})
