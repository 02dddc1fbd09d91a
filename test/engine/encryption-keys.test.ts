import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { isOncelyError } from '../../src/index.js'
import {
  isSealedBytes,
  isSealedText,
  openBytes,
  openJson,
  parseEncryptionKeys,
  resolveKeyring,
  sealBytes,
  sealedKeyId,
  sealJson,
  type EncryptionOptions,
  type SealedPlace,
} from '../../src/engine/encryption-keys.js'

// The keys and the envelope of encryption at rest (issue 23), without a database: how the
// option and the environment's text are read, what a sealed value looks like, and that a value
// sealed once opens for as long as its key is kept. test/engine/encryption.test.ts runs the
// same through the engine on PostgreSQL.
const keyA = randomBytes(32)
const keyB = randomBytes(32)
const place: SealedPlace = { scope: 'u1', key: 'order-1', field: 'response' }
const stepPlace: SealedPlace = { scope: 'u1', key: 'order-1', field: 'step:charge' }

/** The message of what `run` throws, checked to be an `ONCELY_INVALID_OPTION`. */
const refusal = (run: () => unknown): string => {
  try {
    run()
  } catch (error) {
    expect(isOncelyError(error, 'ONCELY_INVALID_OPTION')).toBe(true)
    return (error as Error).message
  }
  throw new Error('accepted')
}
/** The error `run` throws, checked to be an `ONCELY_DECRYPTION_FAILED`. */
const decryptionFailure = (run: () => unknown): Error => {
  try {
    run()
  } catch (error) {
    expect(isOncelyError(error, 'ONCELY_DECRYPTION_FAILED')).toBe(true)
    return error as Error
  }
  throw new Error('opened')
}

describe('resolveKeyring', () => {
  it('takes keys as bytes or as base64 text, and keeps a copy of each', () => {
    const given = Buffer.from(keyA)
    const ring = resolveKeyring({ keys: { A: given, B: new Uint8Array(keyB), C: keyA.toString('base64') }, current: 'C' })
    expect(ring.current).toBe('C')
    expect([...ring.keys.keys()]).toEqual(['A', 'B', 'C'])
    expect(ring.keys.get('A')).toEqual(keyA)
    expect(ring.keys.get('B')).toEqual(keyB)
    expect(ring.keys.get('C')).toEqual(keyA)
    // A caller that reuses its buffer cannot change a key already resolved.
    given.fill(0)
    expect(ring.keys.get('A')).toEqual(keyA)
    expect(Object.isFrozen(ring)).toBe(true)
  })

  it('refuses an option that is not { keys, current }, naming it', () => {
    for (const option of [undefined, null, 'A', { keys: null, current: 'A' }, { keys: 'A', current: 'A' }, { current: 'A' }]) {
      expect(refusal(() => resolveKeyring(option as unknown as EncryptionOptions))).toMatch(/^option encryption must be \{ keys: \{ \[id\]: key \}, current: id \}; got /)
    }
  })

  it('refuses a key that is not 32 bytes, or neither bytes nor text, saying how long it was and never showing it', () => {
    expect(refusal(() => resolveKeyring({ keys: { A: randomBytes(16) }, current: 'A' }))).toBe('option encryption.keys.A must be 32 bytes (a Buffer, or 44 characters of base64); got 16 bytes')
    expect(refusal(() => resolveKeyring({ keys: { A: 42 as unknown as string }, current: 'A' }))).toBe('option encryption.keys.A must be 32 bytes (a Buffer, or 44 characters of base64); got 0 bytes')
    // The base64 text of a 32-byte key is 44 characters; the same text is not taken as UTF-8.
    const text = keyA.toString('base64')
    expect(refusal(() => resolveKeyring({ keys: { A: Buffer.from(text) }, current: 'A' }))).toBe('option encryption.keys.A must be 32 bytes (a Buffer, or 44 characters of base64); got 44 bytes')
  })

  it('takes ids of 1 to 64 of A-Z a-z 0-9 _ . - only', () => {
    expect([...resolveKeyring({ keys: { 'k_2026.v-1': keyA }, current: 'k_2026.v-1' }).keys.keys()]).toEqual(['k_2026.v-1'])
    expect(refusal(() => resolveKeyring({ keys: { 'a:b': keyA }, current: 'a:b' }))).toBe('option encryption.keys has the id "a:b"; an id is 1 to 64 of A-Z a-z 0-9 _ . -; got "a:b"')
  })

  it('refuses a current key that is not one of the keys', () => {
    expect(refusal(() => resolveKeyring({ keys: { A: keyA }, current: 'B' }))).toBe('option encryption.current must be the id of one of encryption.keys; got "B"')
    expect(refusal(() => resolveKeyring({ keys: { A: keyA }, current: undefined as unknown as string }))).toMatch(/^option encryption.current must be the id of one of encryption.keys; got /)
  })
})

describe('parseEncryptionKeys', () => {
  it('reads id:base64 pairs separated by commas, spaces and empty entries ignored; the current key is the last listed', () => {
    expect(parseEncryptionKeys(' A:aaa=, B:bb:b= ,, ')).toEqual({ keys: { A: 'aaa=', B: 'bb:b=' }, current: 'B' })
  })

  it('takes the current key given, unless it is empty', () => {
    expect(parseEncryptionKeys('A:aaa,B:bbb', 'A')).toEqual({ keys: { A: 'aaa', B: 'bbb' }, current: 'A' })
    expect(parseEncryptionKeys('A:aaa,B:bbb', '')).toEqual({ keys: { A: 'aaa', B: 'bbb' }, current: 'B' })
  })

  it('refuses an entry without an id, never showing the entry', () => {
    expect(refusal(() => parseEncryptionKeys('A:aaa,:secret'))).toBe('option encryption keys must be id:base64 pairs separated by commas; got an entry without an id')
    expect(refusal(() => parseEncryptionKeys('secret'))).toBe('option encryption keys must be id:base64 pairs separated by commas; got an entry without an id')
  })

  it('refuses a text without any key', () => {
    expect(refusal(() => parseEncryptionKeys(' , '))).toBe('option encryption keys must list at least one id:base64 key; got ""')
  })
})

describe('the sealed envelope', () => {
  const ring = resolveKeyring({ keys: { A: keyA, B: keyB }, current: 'B' })

  it('bytes open to what was sealed, and only where they were sealed', () => {
    const sealed = sealBytes(ring, place, Buffer.from('the body'))
    expect(isSealedBytes(sealed)).toBe(true)
    expect(sealedKeyId(sealed)).toBe('B')
    expect(openBytes(ring, place, sealed).toString()).toBe('the body')
    // Seen through a view with an offset, as a driver may hand a column over.
    const framed = Buffer.concat([Buffer.from('xxxx'), sealed])
    expect(openBytes(ring, place, framed.subarray(4)).toString()).toBe('the body')
    expect(sealedKeyId(framed.subarray(4))).toBe('B')
    for (const elsewhere of [{ ...place, scope: 'u2' }, { ...place, key: 'order-2' }, { ...place, field: 'step:charge' }]) {
      expect(decryptionFailure(() => openBytes(ring, elsewhere, sealed)).message).toMatch(/does not decrypt under key id "B"/)
    }
  })

  it('a JSON value opens to an equal value; undefined is sealed as null', () => {
    const sealed = sealJson(ring, stepPlace, { id: 'ch_1', amount: 1000 })
    expect(sealed).toMatch(/^oncely:enc:v1:B:[A-Za-z0-9+/]+=*$/)
    expect(isSealedText(sealed)).toBe(true)
    expect(sealedKeyId(sealed)).toBe('B')
    expect(openJson(ring, stepPlace, sealed)).toEqual({ id: 'ch_1', amount: 1000 })
    expect(openJson(ring, stepPlace, sealJson(ring, stepPlace, undefined))).toBeNull()
    expect(decryptionFailure(() => openJson(ring, { ...stepPlace, field: 'step:refund' }, sealed)).message).toMatch(/does not decrypt/)
  })

  it('tells a sealed value from one stored in clear', () => {
    expect(isSealedBytes(Buffer.from('{"id":"ch_1"}'))).toBe(false)
    // The magic bytes alone are not an envelope: a clear body may be exactly them.
    expect(isSealedBytes(Buffer.from([0x00, 0x6f, 0x65, 0x01]))).toBe(false)
    expect(isSealedBytes(Buffer.from([0x00, 0x6f, 0x65, 0x01, 0x01]))).toBe(true)
    expect(isSealedText({ id: 'ch_1' })).toBe(false)
    expect(isSealedText(42)).toBe(false)
    expect(isSealedText('ch_1 oncely:enc:v1:')).toBe(false)
  })

  // Sealed by this code once, with a fixed key: every later version must still open them, so the
  // envelope's layout, the text prefix and what a value is bound to may never change.
  const fixed = resolveKeyring({ keys: { 'k-2026': Buffer.alloc(32, 7) }, current: 'k-2026' })
  it('a value sealed by an earlier version still opens', () => {
    const bytes = Buffer.from('AG9lAQZrLTIwMja8uYq90PDJ8EIhoON7C42/mLkzzpGzm5Dkeo+Kcsu2fV8=', 'base64')
    expect(isSealedBytes(bytes)).toBe(true)
    expect(sealedKeyId(bytes)).toBe('k-2026')
    expect(openBytes(fixed, place, bytes).toString()).toBe('hello')
    const text = 'oncely:enc:v1:k-2026:QSsw9EosXP8rl2jk/nTUIDi5yG4rR3B0qeIlTY2DDZNlyWzOrpwTpRc='
    expect(isSealedText(text)).toBe(true)
    expect(sealedKeyId(text)).toBe('k-2026')
    expect(openJson(fixed, stepPlace, text)).toEqual({ id: 'ch_1' })
  })

  it('a value sealed under a key no longer configured names its key id and the ones there are', () => {
    const sealed = sealBytes(fixed, place, Buffer.from('hello'))
    expect(decryptionFailure(() => openBytes(ring, place, sealed)).message).toBe('the response of key "order-1" is encrypted under key id "k-2026", which is not among the configured keys (A, B)')
    expect(decryptionFailure(() => openBytes(undefined, place, sealed)).message).toBe('the response of key "order-1" is encrypted (key id "k-2026") and no encryption keys are configured')
    expect(decryptionFailure(() => openJson(undefined, stepPlace, sealJson(fixed, stepPlace, 1))).message).toBe('the step:charge of key "order-1" is encrypted (key id "k-2026") and no encryption keys are configured')
  })

  it('a truncated or altered envelope is a decryption failure that says why, never a crash or garbage', () => {
    const sealed = sealBytes(ring, place, Buffer.from('the body'))
    // Cut inside the tag: the IV and tag must be whole before anything is deciphered.
    const cut = decryptionFailure(() => openBytes(ring, place, sealed.subarray(0, 4 + 1 + 1 + 12 + 8)))
    expect(cut.message).toBe('the response of key "order-1" does not decrypt under key id "B": the key is wrong, or the stored value was altered or copied from another row')
    expect((cut.cause as Error).message).toBe('the envelope is truncated')
    const text = sealJson(ring, stepPlace, 1)
    expect((decryptionFailure(() => openJson(ring, stepPlace, text.slice(0, 'oncely:enc:v1:B:'.length + 8))).cause as Error).message).toBe('the envelope is truncated')
    // A text with the prefix and no key id after it.
    expect(decryptionFailure(() => openJson(ring, stepPlace, 'oncely:enc:v1:AAAA')).message).toBe('the step:charge of key "order-1" is encrypted under key id "", which is not among the configured keys (A, B)')
  })
})
