import { randomBytes } from 'node:crypto'

let lastMs = -1
let counter = 0

/**
 * A UUIDv7 (RFC 9562 §5.7): 48 bits of Unix milliseconds, then random bits, minted here because
 * PostgreSQL 15 has no `uuidv7()`. Within one millisecond the 12 `rand_a` bits count up from a
 * random start (RFC 9562 §6.2, method 1), so ids minted by one process sort in minting order.
 * Not used for publish order: minting happens before commit, and commits may reorder.
 *
 * @example
 * ```ts
 * import { uuidv7 } from 'oncely/outbox'
 * const id = uuidv7() // '019…-…-7…'
 * ```
 */
export function uuidv7(now: number = Date.now()): string {
  if (now > lastMs) {
    lastMs = now
    counter = randomBytes(2).readUInt16BE() & 0x7ff
  } else {
    counter++
    // 4096 ids in one millisecond: borrow the next millisecond rather than repeat an order.
    if (counter > 0xfff) {
      lastMs++
      counter = 0
    }
  }
  const bytes = randomBytes(16)
  const ms = lastMs
  bytes[0] = Math.floor(ms / 2 ** 40) & 0xff
  bytes[1] = Math.floor(ms / 2 ** 32) & 0xff
  bytes[2] = (ms >>> 24) & 0xff
  bytes[3] = (ms >>> 16) & 0xff
  bytes[4] = (ms >>> 8) & 0xff
  bytes[5] = ms & 0xff
  bytes[6] = 0x70 | (counter >>> 8)
  bytes[7] = counter & 0xff
  bytes[8] = 0x80 | (bytes[8]! & 0x3f)
  const hex = bytes.toString('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

/** The millisecond timestamp a UUIDv7 carries. */
export function uuidv7Time(id: string): number {
  return Number.parseInt(id.replaceAll('-', '').slice(0, 12), 16)
}
