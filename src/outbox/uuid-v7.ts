import { randomFillSync } from 'node:crypto'

let lastMs = -1
let counter = 0

/**
 * Random bytes drawn from the system in batches (as `crypto.randomUUID` does with its own
 * cache): one fill serves 256 ids, where a `randomBytes(16)` per id cost an allocation and a
 * call into the crypto library each (issue 21).
 */
const entropy = Buffer.alloc(4096)
let entropyAt = entropy.length

function randomSlice(length: number): Buffer {
  if (entropyAt + length > entropy.length) {
    randomFillSync(entropy)
    entropyAt = 0
  }
  const slice = entropy.subarray(entropyAt, entropyAt + length)
  entropyAt += length
  return slice
}

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
    counter = randomSlice(2).readUInt16BE() & 0x7ff
  } else {
    counter++
    // 4096 ids in one millisecond: borrow the next millisecond rather than repeat an order.
    if (counter > 0xfff) {
      lastMs++
      counter = 0
    }
  }
  // Written over in place: the slice is never handed out again.
  const bytes = randomSlice(16)
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
