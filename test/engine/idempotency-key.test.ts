import { describe, expect, it } from 'vitest'
import { parseIdempotencyKey } from '../../src/index.js'

// The Idempotency-Key header alone, no SQL: every rule of parseIdempotencyKey at its edge
// (issue 13: the mutants these kill survived the rest of the suite).
const refused = (header: Parameters<typeof parseIdempotencyKey>[0]) => {
  const parsed = parseIdempotencyKey(header)
  if (parsed.ok) throw new Error(`accepted ${JSON.stringify(header)} as ${JSON.stringify(parsed.key)}`)
  return parsed.reason
}
const accepted = (header: Parameters<typeof parseIdempotencyKey>[0]) => {
  const parsed = parseIdempotencyKey(header)
  if (!parsed.ok) throw new Error(`refused ${JSON.stringify(header)}: ${parsed.reason}`)
  return parsed.key
}

describe('parseIdempotencyKey', () => {
  it('a missing header is refused as missing, undefined or null', () => {
    expect(refused(undefined)).toMatch(/missing/)
    expect(refused(null)).toMatch(/missing/)
  })

  it('a header sent as a list is read only when it holds exactly one value', () => {
    expect(accepted(['abc'])).toBe('abc')
    expect(refused(['a', 'b'])).toMatch(/sent once/)
    expect(refused([])).toMatch(/sent once/)
  })

  it('surrounding whitespace is not part of the key', () => {
    expect(accepted('  abc \t')).toBe('abc')
    expect(refused('   ')).toMatch(/empty/)
  })

  it('a quoted key names the same operation as the bare one, and "" is an empty key', () => {
    expect(accepted('"abc"')).toBe('abc')
    expect(refused('""')).toMatch(/empty/)
  })

  it('a lone quote, or a quote at one end only, is a broken quoted key, not a bare one', () => {
    // The draft's key is an RFC 8941 string: `"abc` is one cut short, never the key `"abc`.
    expect(refused('"')).toMatch(/malformed/)
    expect(refused('"abc')).toMatch(/malformed/)
    expect(refused('abc"')).toMatch(/malformed/)
    expect(refused(' "abc ')).toMatch(/malformed/)
    // RFC 8941 parameters are not part of the key and are not read: refused, not taken as the key.
    expect(refused('"abc";p=1')).toMatch(/malformed/)
    // A quote inside a bare key is still part of it, as before.
    expect(accepted('a"b')).toBe('a"b')
  })

  it('a quoted key reads \\" and \\\\ as escapes and refuses any other escape or a bare quote inside', () => {
    expect(accepted('"a\\"b"')).toBe('a"b')
    expect(accepted('"a\\\\b"')).toBe('a\\b')
    expect(refused('"a\\nb"')).toMatch(/malformed/)
    expect(refused('"a"b"')).toMatch(/malformed/)
    // The escape's backslash may not take the closing quote for itself.
    expect(refused('"abc\\"')).toMatch(/malformed/)
  })

  it('an unquoted comma is two keys sent at once; a quoted one is part of the key', () => {
    expect(refused('a, b')).toMatch(/sent once/)
    expect(refused('a,b')).toMatch(/comma/)
    expect(accepted('"a, b"')).toBe('a, b')
  })

  it('a key holds at most 255 characters', () => {
    expect(accepted('k'.repeat(255))).toHaveLength(255)
    expect(refused('k'.repeat(256))).toMatch(/longer than 255/)
    expect(accepted(`"${'k'.repeat(255)}"`)).toHaveLength(255)
    expect(refused(`"${'k'.repeat(256)}"`)).toMatch(/longer than 255/)
  })

  it('every character of the key is printable ASCII, space and tilde included', () => {
    expect(accepted('a b~')).toBe('a b~')
    expect(accepted('!')).toBe('!')
    expect(refused('aé')).toMatch(/printable ASCII/)
    expect(refused('éa')).toMatch(/printable ASCII/)
    expect(refused('a\x7fb')).toMatch(/printable ASCII/)
    expect(refused('a\x1fb')).toMatch(/printable ASCII/)
  })
})
