import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto'
import { OncelyError } from '../errors.js'
import { invalid, invalidHidden } from '../option-validation.js'

/**
 * Keys for encryption at rest (issue 23): 32-byte AES-256 keys by id, as a `Buffer`/`Uint8Array`
 * or base64 text. New values are sealed under `current`; every key listed still opens the values
 * sealed under it, so a key is rotated by adding the new one as `current` and keeping the old.
 *
 * @example
 * ```ts
 * import { randomBytes } from 'node:crypto'
 * import type { EncryptionOptions } from 'oncely'
 * const rotated: EncryptionOptions = { keys: { k2025: process.env.KEY_2025 ?? '', k2026: randomBytes(32) }, current: 'k2026' }
 * ```
 */
export interface EncryptionOptions {
  /** Key id → 32-byte key (bytes, or base64). Ids are 1 to 64 of `A-Z a-z 0-9 _ . -`. (Default: none, required) */
  keys: Readonly<Record<string, Uint8Array | string>>
  /** The id of the key new values are sealed under; one of `keys`. (Default: none, required) */
  current: string
}

/** Resolved keys: what sealing and opening need. */
export interface Keyring {
  readonly current: string
  readonly keys: ReadonlyMap<string, Buffer>
}

const KEY_ID = /^[A-Za-z0-9_.-]{1,64}$/
const IV_BYTES = 12
const TAG_BYTES = 16
/** A sealed body starts with these bytes: NUL, "oe", the envelope's version. */
const BYTES_MAGIC = Buffer.from([0x00, 0x6f, 0x65, 0x01])
/** A sealed JSON value (a step result) is a string with this prefix, then `<key id>:<base64>`. */
const TEXT_PREFIX = 'oncely:enc:v1:'

/** Validates the option once, at start-up (docs/conventions.md, Shape). */
export function resolveKeyring(option: EncryptionOptions): Keyring {
  if (typeof option !== 'object' || option === null || typeof option.keys !== 'object' || option.keys === null) {
    throw invalid('encryption', 'must be { keys: { [id]: key }, current: id }', option)
  }
  const keys = new Map<string, Buffer>()
  for (const [id, value] of Object.entries(option.keys)) {
    if (!KEY_ID.test(id)) throw invalid('encryption.keys', `has the id ${JSON.stringify(id)}; an id is 1 to 64 of A-Z a-z 0-9 _ . -`, id)
    const key = typeof value === 'string' ? Buffer.from(value, 'base64') : value instanceof Uint8Array ? Buffer.from(value) : undefined
    if (key?.length !== 32) throw invalidHidden(`encryption.keys.${id}`, 'must be 32 bytes (a Buffer, or 44 characters of base64)', `${key?.length ?? 0} bytes`)
    keys.set(id, key)
  }
  if (typeof option.current !== 'string' || !keys.has(option.current)) throw invalid('encryption.current', 'must be the id of one of encryption.keys', option.current)
  return Object.freeze({ current: option.current, keys })
}

/**
 * Reads keys from text, as the reference service and the CLI take them from the environment:
 * `id:base64,id:base64`; the current key is `current` when given, else the last listed.
 *
 * @example
 * ```ts
 * import { createEngine, parseEncryptionKeys } from 'oncely'
 * const encryption = parseEncryptionKeys(process.env.ONCELY_ENCRYPTION_KEYS ?? '', process.env.ONCELY_ENCRYPTION_CURRENT)
 * const sealed = createEngine({ store, encryption })
 * ```
 */
export function parseEncryptionKeys(text: string, current?: string): EncryptionOptions {
  const keys: Record<string, string> = {}
  let last: string | undefined
  for (const entry of text.split(',').map((part) => part.trim()).filter((part) => part !== '')) {
    const colon = entry.indexOf(':')
    if (colon <= 0) throw invalidHidden('encryption keys', 'must be id:base64 pairs separated by commas', 'an entry without an id')
    last = entry.slice(0, colon)
    keys[last] = entry.slice(colon + 1)
  }
  const currentId = current === undefined || current === '' ? last : current
  if (currentId === undefined) throw invalid('encryption keys', 'must list at least one id:base64 key', '')
  return { keys, current: currentId }
}

/** What a sealed value is bound to: a ciphertext copied to another row or field does not open. */
export interface SealedPlace {
  scope: string
  key: string
  /** `response`, or `step:<name>`. */
  field: string
}

const aadOf = (place: SealedPlace, keyId: string) => Buffer.from(JSON.stringify(['oncely-encryption', 1, place.scope, place.key, place.field, keyId]))

/** Whether bytes are a sealed envelope (a body written before encryption was on is not). */
export const isSealedBytes = (bytes: Uint8Array): boolean => bytes.length > BYTES_MAGIC.length && Buffer.from(bytes.buffer, bytes.byteOffset, BYTES_MAGIC.length).equals(BYTES_MAGIC)

/** Whether a stored step result is a sealed envelope. */
export const isSealedText = (value: unknown): value is string => typeof value === 'string' && value.startsWith(TEXT_PREFIX)

/** AES-256-GCM under the current key, a random 96-bit IV: magic, id length, id, IV, tag, ciphertext. */
export function sealBytes(ring: Keyring, place: SealedPlace, plain: Uint8Array): Buffer {
  const id = Buffer.from(ring.current)
  const [iv, tag, ciphertext] = encrypt(ring, place, plain)
  return Buffer.concat([BYTES_MAGIC, Buffer.from([id.length]), id, iv, tag, ciphertext])
}

export function openBytes(ring: Keyring | undefined, place: SealedPlace, sealed: Uint8Array): Buffer {
  const bytes = Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength)
  const idLength = bytes[BYTES_MAGIC.length] ?? 0
  const start = BYTES_MAGIC.length + 1
  const keyId = bytes.subarray(start, start + idLength).toString()
  const iv = bytes.subarray(start + idLength, start + idLength + IV_BYTES)
  const tag = bytes.subarray(start + idLength + IV_BYTES, start + idLength + IV_BYTES + TAG_BYTES)
  return decrypt(ring, place, keyId, iv, tag, bytes.subarray(start + idLength + IV_BYTES + TAG_BYTES))
}

/** A JSON value sealed into a string: `oncely:enc:v1:<key id>:<base64 of IV, tag, ciphertext>`. */
export function sealJson(ring: Keyring, place: SealedPlace, value: unknown): string {
  const [iv, tag, ciphertext] = encrypt(ring, place, Buffer.from(JSON.stringify(value ?? null)))
  return `${TEXT_PREFIX}${ring.current}:${Buffer.concat([iv, tag, ciphertext]).toString('base64')}`
}

export function openJson(ring: Keyring | undefined, place: SealedPlace, sealed: string): unknown {
  const rest = sealed.slice(TEXT_PREFIX.length)
  const colon = rest.indexOf(':')
  const keyId = colon < 0 ? '' : rest.slice(0, colon)
  const bytes = Buffer.from(rest.slice(colon + 1), 'base64')
  const plain = decrypt(ring, place, keyId, bytes.subarray(0, IV_BYTES), bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES), bytes.subarray(IV_BYTES + TAG_BYTES))
  return JSON.parse(plain.toString()) as unknown
}

/** The key id a sealed value names, for operators (`oncely keys show`). */
export function sealedKeyId(value: Uint8Array | string): string {
  if (typeof value === 'string') return value.slice(TEXT_PREFIX.length).split(':', 1)[0] ?? ''
  const bytes = Buffer.from(value.buffer, value.byteOffset, value.byteLength)
  const start = BYTES_MAGIC.length + 1
  return bytes.subarray(start, start + (bytes[BYTES_MAGIC.length] ?? 0)).toString()
}

function encrypt(ring: Keyring, place: SealedPlace, plain: Uint8Array): [Buffer, Buffer, Buffer] {
  const iv = randomBytes(IV_BYTES)
  const cipher = createCipheriv('aes-256-gcm', ring.keys.get(ring.current) as Buffer, iv)
  cipher.setAAD(aadOf(place, ring.current))
  const ciphertext = Buffer.concat([cipher.update(plain), cipher.final()])
  return [iv, cipher.getAuthTag(), ciphertext]
}

function decrypt(ring: Keyring | undefined, place: SealedPlace, keyId: string, iv: Buffer, tag: Buffer, ciphertext: Buffer): Buffer {
  const where = `the ${place.field} of key ${JSON.stringify(place.key)}`
  const key = ring?.keys.get(keyId)
  if (ring === undefined) throw new OncelyError('ONCELY_DECRYPTION_FAILED', `${where} is encrypted (key id ${JSON.stringify(keyId)}) and no encryption keys are configured`)
  if (key === undefined) throw new OncelyError('ONCELY_DECRYPTION_FAILED', `${where} is encrypted under key id ${JSON.stringify(keyId)}, which is not among the configured keys (${[...ring.keys.keys()].join(', ')})`)
  try {
    if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES) throw new Error('the envelope is truncated')
    const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES })
    decipher.setAAD(aadOf(place, keyId))
    decipher.setAuthTag(tag)
    return Buffer.concat([decipher.update(ciphertext), decipher.final()])
  } catch (cause) {
    throw new OncelyError('ONCELY_DECRYPTION_FAILED', `${where} does not decrypt under key id ${JSON.stringify(keyId)}: the key is wrong, or the stored value was altered or copied from another row`, { cause })
  }
}
