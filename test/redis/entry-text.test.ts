import { createHmac } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { decodeEntry, encodeEntry } from '../../src/redis/entry.js'

// An entry is verified on the text its writer signed, not serialised again (issue 21). The text
// must stay byte for byte what earlier releases wrote and read: entries already in Redis when a
// new release starts must still verify, and the earlier releases beside it must read the new
// one's. The earlier writer is written out here as it was.
const secret = Buffer.from('a test secret of enough bytes')
const response = { status: 201, headers: [['content-type', 'application/json']] as Array<[string, string]>, body: Buffer.from('{"id":"ch_1","amount":1000}') }

/** The entry as the earlier writer made it: the MAC over `[scope, key, wire]`, then `{ ...wire, m }`. */
function earlierWriter(scope: string, key: string, wire: Record<string, unknown>): string {
  return JSON.stringify({ ...wire, m: earlierMac(scope, key, wire) })
}

function earlierMac(scope: string, key: string, wire: Record<string, unknown>): string {
  return createHmac('sha256', secret).update(JSON.stringify([scope, key, wire])).digest('base64url')
}

const settledWire = { v: 2, k: 's', st: 'completed', f: 'v2:fp', c: '00000000-0000-4000-8000-000000000001', t: 60_000, rs: 201, rh: response.headers, rb: response.body.toString('base64') }
const inFlightWire = { v: 2, k: 'i', f: 'v2:fp', c: '00000000-0000-4000-8000-000000000002', t: 5_000, la: 120 }

describe('a cache entry as text', () => {
  it('is written as the earlier releases wrote it, for a settled key and a claim in flight', () => {
    const settled = encodeEntry(secret, 'u1', 'k "1"', { kind: 'settled', status: 'completed', fingerprint: 'v2:fp', claimId: settledWire.c, lifeMs: 60_000, response })
    expect(settled).toBe(earlierWriter('u1', 'k "1"', settledWire))
    const inFlight = encodeEntry(secret, 'u1', 'k2', { kind: 'in-flight', fingerprint: 'v2:fp', claimId: inFlightWire.c, lifeMs: 5_000, leaseAgeMs: 120 })
    expect(inFlight).toBe(earlierWriter('u1', 'k2', inFlightWire))
  })

  it("reads what the earlier releases wrote, and refuses it for another scope or key", () => {
    const value = earlierWriter('u1', 'k "1"', settledWire)
    const entry = decodeEntry(secret, 'u1', 'k "1"', value, 59_000)
    expect(entry).toMatchObject({ kind: 'settled', status: 'completed', fingerprint: 'v2:fp', claimId: settledWire.c, remainingMs: 59_000 })
    expect(entry?.kind === 'settled' && Buffer.from(entry.response.body).equals(response.body)).toBe(true)
    expect(decodeEntry(secret, 'u1', 'k2', earlierWriter('u1', 'k2', inFlightWire), 4_000)).toEqual({ kind: 'in-flight', fingerprint: 'v2:fp', claimId: inFlightWire.c, remainingMs: 4_000, leaseAgeMs: 1_120 })
    expect(decodeEntry(secret, 'u2', 'k "1"', value, 59_000)).toBeUndefined()
    expect(decodeEntry(secret, 'u1', 'k "2"', value, 59_000)).toBeUndefined()
  })

  it('refuses a text changed after it was signed, anywhere in it', () => {
    const value = earlierWriter('u1', 'k1', settledWire)
    const changed = [
      value.replace('"rs":201', '"rs":200'),
      value.replace('"t":60000', '"t":600000'),
      value.replace('"v":2,', '"v":2,"x":1,'),
      // The same fields and MAC, written otherwise: only the signed text verifies.
      value.replace('{"v":2,', '{ "v":2,'),
      `${value} `,
      // `m` first: never written so, so never read so.
      JSON.stringify({ m: earlierMac('u1', 'k1', settledWire), ...settledWire }),
      value.slice(0, -2) + 'A"}',
    ]
    for (const text of changed) expect(decodeEntry(secret, 'u1', 'k1', text, 59_000), text).toBeUndefined()
    expect(decodeEntry(secret, 'u1', 'k1', value, 59_000)).toMatchObject({ kind: 'settled' })
  })
})
