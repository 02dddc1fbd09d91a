import type { ClaimTiming, Fence, FinalOutcome, IdempotencyStore } from '../engine/store.js'
import type { ClaimResult, IdempotencyRequest } from '../engine/types.js'
import type { RedisCache } from './cache.js'

/** What the owner of a claim knows that its completion entry needs. */
interface HeldClaim {
  claimId: string
  fingerprint: string
  /** performance.now() by which the key surely has not expired: its claim was sent before, with the TTL. */
  expiresBy: number
}

/** Claims held at once before the map is pruned of those past their key's expiry. */
const PRUNE_AT = 10_000

/**
 * Puts the Redis cache in front of a store (Invariant 10: Redis is a cache, never the record).
 *
 * - A request whose key has a verified entry is answered from it: 422 when the fingerprint
 *   differs (Invariant 5, before anything else), the stored response of a settled key, 409 for a
 *   claim in flight. Every other request goes to the store: a miss, an entry not ours, an
 *   expired one, any Redis error. The cache never says a key is new.
 * - What the store answers is remembered: a claim in flight (living within the time before it
 *   could go stale); the outcome, written by its owner once committed, expiring before the key.
 * - A release or a suspension evicts the key; a completion inside the caller's own transaction,
 *   whose commit the cache cannot see, evicts it too (the next read caches the committed state).
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis'
 * import { createEngine } from 'oncely'
 * import { createPostgresStore } from 'oncely/postgres'
 * import { createRedisCache, withRedisCache } from 'oncely/redis'
 * declare const pool: import('pg').Pool
 * const cache = createRedisCache({ redis: new Redis({ enableOfflineQueue: false, maxRetriesPerRequest: 0 }), secret: process.env.ONCELY_CACHE_SECRET ?? '', staleAfterMs: 30_000 })
 * const engine = createEngine({ store: withRedisCache(createPostgresStore({ pool }), cache), staleAfterMs: 30_000 })
 * ```
 */
export function withRedisCache<Tx, S extends IdempotencyStore<Tx>>(store: S, cache: RedisCache): S {
  const held = new Map<string, HeldClaim>()
  const hold = (token: string, claim: HeldClaim) => {
    if (held.size >= PRUNE_AT) {
      const now = performance.now()
      for (const [key, value] of held) if (value.expiresBy <= now) held.delete(key)
    }
    held.set(token, claim)
  }
  const rememberOutcome = (fence: Fence, outcome: FinalOutcome) => {
    const claim = held.get(fence.fenceToken)
    held.delete(fence.fenceToken)
    if (!claim) return cache.evict(fence.scope, fence.key)
    return cache.rememberSettled(
      { scope: fence.scope, key: fence.key, status: outcome.status, fingerprint: claim.fingerprint, claimId: claim.claimId, expiresInMs: claim.expiresBy - performance.now(), response: outcome.response },
      0,
      true,
    )
  }
  const letGo = async (fence: Fence, done: boolean) => {
    held.delete(fence.fenceToken)
    if (done) await cache.evict(fence.scope, fence.key)
    return done
  }

  const cached: IdempotencyStore<Tx> = {
    async claim(request: IdempotencyRequest, timing: ClaimTiming): Promise<ClaimResult> {
      const entry = await cache.read(request.scope, request.key)
      if (entry) {
        // Invariant 5: mismatch before replay or conflict, from the cache as from the store.
        if (entry.fingerprint !== request.fingerprint) return { kind: 'mismatch' }
        if (entry.kind === 'settled') return { kind: 'completed', fingerprint: entry.fingerprint, response: entry.response }
        const leaseAgeMs = entry.leaseAgeMs + (Date.now() - entry.writtenAt)
        return { kind: 'in-progress', fingerprint: entry.fingerprint, retryAfterMs: Math.max(0, timing.staleAfterMs - leaseAgeMs) }
      }
      const sentAt = performance.now()
      const result = await store.claim(request, timing)
      const elapsedMs = performance.now() - sentAt
      if (result.kind === 'claimed') {
        const { claim } = result
        hold(claim.fenceToken, { claimId: claim.claimId, fingerprint: request.fingerprint, expiresBy: sentAt + timing.ttlMs })
        // Sent on the client's one connection before any later write for this claim, so an
        // eviction or the outcome always lands after it.
        void cache.rememberInFlight({ scope: request.scope, key: request.key, fingerprint: request.fingerprint, claimId: claim.claimId, leaseAgeMs: 0 }, elapsedMs)
      } else if (result.kind === 'in-progress' && result.retryAfterMs > 0) {
        const leaseAgeMs = timing.staleAfterMs - result.retryAfterMs
        void cache.rememberInFlight({ scope: request.scope, key: request.key, fingerprint: result.fingerprint, claimId: '', leaseAgeMs }, elapsedMs)
      }
      return result
    },
    commitPhase: (fence, phase, result) => store.commitPhase(fence, phase, result),
    renewLease: (fence, ttlMs) => store.renewLease(fence, ttlMs),
    async complete(fence: Fence, outcome: FinalOutcome, tx?: Tx) {
      const done = await store.complete(fence, outcome, tx)
      if (!done) return letGo(fence, false)
      // In the caller's transaction the commit is still to come: evict rather than announce it.
      if (tx !== undefined) return letGo(fence, true)
      await rememberOutcome(fence, outcome)
      return true
    },
    async completeInTransaction<T>(fence: Fence, work: (tx: Tx) => Promise<{ outcome: FinalOutcome; value: T }>) {
      let outcome: FinalOutcome | undefined
      const result = await store.completeInTransaction(fence, async (tx) => {
        const done = await work(tx)
        outcome = done.outcome
        return done
      })
      if (result.completed && outcome) await rememberOutcome(fence, outcome)
      else held.delete(fence.fenceToken)
      return result
    },
    release: async (fence) => letGo(fence, await store.release(fence)),
    suspend: async (fence) => letGo(fence, await store.suspend(fence)),
  }
  return Object.freeze({ ...store, ...cached })
}
