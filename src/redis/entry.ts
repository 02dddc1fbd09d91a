import { createHmac, timingSafeEqual } from 'node:crypto'
import type { StoredResponse } from '../engine/types.js'

/**
 * What the cache holds for one key: a settled key's stored response (a replay), or a claim in
 * flight (a 409). Never "no row": the cache cannot say a key is new (Invariant 10).
 */
export type CacheEntry =
  | {
      kind: 'settled'
      status: 'completed' | 'failed'
      fingerprint: string
      claimId: string
      /** Epoch milliseconds (the writer's clock) after which the entry is void: never later than the key's expiry. */
      expiresAt: number
      response: StoredResponse
    }
  | {
      kind: 'in-flight'
      fingerprint: string
      claimId: string
      /** Epoch milliseconds after which the entry is void: never later than the claim could go stale. */
      expiresAt: number
      /** The lease's age when the entry was written, and when that was (epoch ms). */
      leaseAgeMs: number
      writtenAt: number
    }

/** The entry a release or an operator's eviction leaves: a miss, that keeps late writers out for a while. */
export const EVICTED = 'evicted'

interface Wire {
  v: 1
  k: 's' | 'i'
  st?: 'completed' | 'failed'
  f: string
  c: string
  e: number
  la?: number
  wa?: number
  rs?: number
  rh?: Array<[string, string]>
  rb?: string
  m: string
}

/**
 * Serialises an entry with an HMAC-SHA256 over the scope, the key and everything the entry
 * claims (fingerprint, claim id, expiry, response), so a value the library did not write, or
 * wrote for another key, is ignored when read.
 */
export function encodeEntry(secret: Uint8Array, scope: string, key: string, entry: CacheEntry): string {
  const wire: Omit<Wire, 'm'> =
    entry.kind === 'settled'
      ? {
          v: 1,
          k: 's',
          st: entry.status,
          f: entry.fingerprint,
          c: entry.claimId,
          e: entry.expiresAt,
          rs: entry.response.status,
          rh: entry.response.headers.map(([name, value]) => [name, value]),
          rb: Buffer.from(entry.response.body.buffer, entry.response.body.byteOffset, entry.response.body.byteLength).toString('base64'),
        }
      : { v: 1, k: 'i', f: entry.fingerprint, c: entry.claimId, e: entry.expiresAt, la: entry.leaseAgeMs, wa: entry.writtenAt }
  return JSON.stringify({ ...wire, m: mac(secret, scope, key, wire) })
}

/** The entry, or undefined when the value is not one this library wrote for this scope and key, or is past its expiry. */
export function decodeEntry(secret: Uint8Array, scope: string, key: string, value: string | null, now = Date.now()): CacheEntry | undefined {
  if (value === null || value === EVICTED) return undefined
  let parsed: Partial<Wire>
  try {
    parsed = JSON.parse(value) as Partial<Wire>
  } catch {
    return undefined
  }
  if (typeof parsed !== 'object' || parsed === null || typeof parsed.m !== 'string') return undefined
  const { m, ...wire } = parsed
  if (!verify(secret, scope, key, wire as Omit<Wire, 'm'>, m)) return undefined
  if (typeof wire.e !== 'number' || wire.e <= now || typeof wire.f !== 'string' || typeof wire.c !== 'string') return undefined
  if (wire.k === 's' && (wire.st === 'completed' || wire.st === 'failed') && typeof wire.rs === 'number' && Array.isArray(wire.rh) && typeof wire.rb === 'string') {
    return {
      kind: 'settled',
      status: wire.st,
      fingerprint: wire.f,
      claimId: wire.c,
      expiresAt: wire.e,
      response: { status: wire.rs, headers: wire.rh, body: Buffer.from(wire.rb, 'base64') },
    }
  }
  if (wire.k === 'i' && typeof wire.la === 'number' && typeof wire.wa === 'number') {
    return { kind: 'in-flight', fingerprint: wire.f, claimId: wire.c, expiresAt: wire.e, leaseAgeMs: wire.la, writtenAt: wire.wa }
  }
  return undefined
}

function mac(secret: Uint8Array, scope: string, key: string, wire: Omit<Wire, 'm'>): string {
  // Scope and key are bound in, so an entry copied under another key never verifies there.
  return createHmac('sha256', secret).update(JSON.stringify([scope, key, wire])).digest('base64url')
}

function verify(secret: Uint8Array, scope: string, key: string, wire: Omit<Wire, 'm'>, given: string): boolean {
  const expected = Buffer.from(mac(secret, scope, key, wire))
  const actual = Buffer.from(given)
  return expected.length === actual.length && timingSafeEqual(expected, actual)
}
