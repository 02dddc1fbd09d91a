import type { StoredResponse } from '../engine/types.js'
import { decodeEntry, encodeEntry, EVICTED, type CacheEntry, type NewCacheEntry } from './entry.js'
import { rawReads, type Bounded } from './raw-reads.js'
import { resolveRedisCacheOptions, type RedisCacheOptions, type ResolvedRedisCacheOptions } from './options.js'

/** Entries are written to expire this much before what they are bounded by: round trips are not instant. */
const MARGIN_MS = 200

/**
 * The Redis half of the cache: signed entries per scope and key, read and written so that no
 * Redis failure is ever more than a miss. Every method resolves; none throws.
 */
export interface RedisCache {
  readonly options: Readonly<ResolvedRedisCacheOptions>
  /** A verified, unexpired entry aged by Redis's clock, or undefined (a miss, an entry not ours, Redis away). */
  read(scope: string, key: string): Promise<CacheEntry | undefined>
  /**
   * Remembers a settled key from its snapshot, read `elapsedMs` ago, expiring before the key.
   * `overwrite` (the owner that just stored the outcome) replaces an in-flight entry or the mark
   * an eviction left; a reader's write never does, so it cannot undo an eviction it raced. A key
   * too close to its expiry to be kept is written nothing; under `overwrite` its entry is evicted,
   * so the claim's in-flight entry cannot outlive the outcome.
   */
  rememberSettled(snapshot: SettledSnapshot, elapsedMs: number, overwrite: boolean): Promise<void>
  /** Remembers a live claim, expiring before it could go stale and within `inFlightMaxMs`; never over another entry. */
  rememberInFlight(snapshot: InFlightSnapshot, elapsedMs: number): Promise<void>
  /** Takes the key's entry back, leaving a mark that keeps late writers out for `evictedMs`. */
  evict(scope: string, key: string): Promise<void>
}

/** What a settled key's entry is made from: the fields of the store's snapshot of its row. */
export interface SettledSnapshot {
  scope: string
  key: string
  status: 'completed' | 'failed'
  fingerprint: string
  claimId: string
  /** Milliseconds until the key expires, in the database's clock at the read. */
  expiresInMs: number
  response: StoredResponse
}

/** What a live claim's entry is made from. */
export interface InFlightSnapshot {
  scope: string
  key: string
  fingerprint: string
  claimId: string
  /** Milliseconds since the lease was renewed, at the read. */
  leaseAgeMs: number
}

/**
 * Creates the cache over a Redis client.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis'
 * import { createRedisCache } from 'oncely/redis'
 * const cache = createRedisCache({ redis: new Redis({ enableOfflineQueue: false, maxRetriesPerRequest: 0, enableAutoPipelining: true }), secret: process.env.ONCELY_CACHE_SECRET ?? '' })
 * ```
 */
export function createRedisCache(options: RedisCacheOptions): RedisCache {
  const resolved = resolveRedisCacheOptions(options)
  const { redis, secret, keyPrefix, timeoutMs, onError } = resolved
  const redisKey = (scope: string, key: string) => `${keyPrefix}${encodeURIComponent(scope)}:${key}`
  // Every command is bounded: a Redis that hangs is a miss after timeoutMs, never a stuck request.
  const bounded: Bounded = async (command, withinMs) => {
    let timer: NodeJS.Timeout | undefined
    // Made only when late: an Error captures a stack, which every answered command would pay for.
    const late = () => new Error(`Redis did not answer within ${timeoutMs} ms`)
    try {
      if (withinMs <= 0) throw late()
      return await Promise.race([
        command(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(late()), withinMs)
        }),
      ])
    } catch (error) {
      onError(error)
      return undefined
    } finally {
      clearTimeout(timer)
    }
  }
  const readRaw = rawReads(redis, timeoutMs, bounded)
  const evict = async (scope: string, key: string) => {
    await bounded(() => redis.set(redisKey(scope, key), EVICTED, 'PX', resolved.evictedMs), timeoutMs)
  }
  const write = async (scope: string, key: string, entry: NewCacheEntry, overwrite: boolean) => {
    const ttlMs = entry.lifeMs
    if (ttlMs <= 0) {
      // Too late to be worth keeping. An overwrite replaces what the key's entry said (a settled
      // outcome over its claim's in-flight entry): leaving that entry would answer "in progress"
      // for a key that is settled, so it goes, and reads fall through to the database.
      if (overwrite) await evict(scope, key)
      return
    }
    const value = encodeEntry(secret, scope, key, entry)
    await bounded(() => (overwrite ? redis.set(redisKey(scope, key), value, 'PX', ttlMs) : redis.set(redisKey(scope, key), value, 'PX', ttlMs, 'NX')), timeoutMs)
  }
  return Object.freeze({
    options: resolved,
    async read(scope: string, key: string) {
      // Issue 22: the entry's age is Redis's, by what is left of the life it was written with,
      // read in the same command as the value (issue 21: with the other reads waiting, if any).
      const read = await readRaw(redisKey(scope, key))
      return read === undefined ? undefined : decodeEntry(secret, scope, key, read[0], read[1])
    },
    async rememberSettled(snapshot: SettledSnapshot, elapsedMs: number, overwrite: boolean) {
      // The key's expiry in the database's clock at the read, aged by this process's monotonic clock since.
      const entry: NewCacheEntry = {
        kind: 'settled',
        status: snapshot.status,
        fingerprint: snapshot.fingerprint,
        claimId: snapshot.claimId,
        lifeMs: Math.floor(snapshot.expiresInMs - elapsedMs - MARGIN_MS),
        response: snapshot.response,
      }
      await write(snapshot.scope, snapshot.key, entry, overwrite)
    },
    async rememberInFlight(snapshot: InFlightSnapshot, elapsedMs: number) {
      const leaseAgeMs = snapshot.leaseAgeMs + elapsedMs
      const lifeMs = Math.floor(Math.min(resolved.inFlightMaxMs, resolved.staleAfterMs - leaseAgeMs - MARGIN_MS))
      await write(snapshot.scope, snapshot.key, { kind: 'in-flight', fingerprint: snapshot.fingerprint, claimId: snapshot.claimId, lifeMs, leaseAgeMs }, false)
    },
    evict,
  })
}
