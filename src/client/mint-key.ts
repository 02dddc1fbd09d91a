import { getRandomValues } from 'node:crypto'

/**
 * Mints an idempotency key: a UUIDv7 (RFC 9562), 48 bits of milliseconds then 74 random bits,
 * so keys sort by creation time in the server's index and in logs.
 *
 * @example
 * ```ts
 * import { mintKey } from 'oncely/client'
 * const key = mintKey() // '0192f0c4-6a1e-7b3c-9d2e-4f5a6b7c8d9e'
 * ```
 */
export function mintKey(now: number = Date.now()): string {
  const bytes = getRandomValues(new Uint8Array(16))
  let ms = now
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256
    ms = Math.floor(ms / 256)
  }
  bytes[6] = 0x70 | (bytes[6]! & 0x0f)
  bytes[8] = 0x80 | (bytes[8]! & 0x3f)
  const hex = Buffer.from(bytes).toString('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}
