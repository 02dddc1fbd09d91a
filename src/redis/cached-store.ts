import { decide } from '../engine/decide.js'
import { oldestFirst } from '../oldest-first.js'
import { decorateStore } from '../engine/store-decorator.js'
import type { ClaimRequest, Fence, FinalOutcome, IdempotencyStore, ReclaimInput, StoreCompletion, TakeOverInput } from '../engine/store.js'
import type { ClaimAttempt, ClaimSnapshot, ClaimState } from '../engine/types.js'
import type { RedisCache } from './cache.js'
import type { CacheEntry } from './entry.js'

/** What the owner of a claim knows that its outcome's entry needs. */
interface HeldClaim {
  claimId: string
  fingerprint: string
  /** performance.now() by which the key surely has not expired: its claim was sent before, with the TTL. */
  expiresBy: number
}

/**
 * Claims this process remembers holding, at most: past it the oldest is forgotten, and its
 * completion, if it ever comes, evicts the key instead of caching its outcome (the next read
 * caches the committed state). A claim leaves the map at its completion, release or suspension;
 * one whose release or suspension failed (the database away) stays until it is pushed out here.
 */
export const MAX_HELD_CLAIMS = 10_000
/** The token of a claim answered from the cache: no claim holds it, so no compare-and-swap can match it. */
const NO_TOKEN = '00000000-0000-0000-0000-000000000000'

/**
 * Puts the Redis cache in front of a store (Invariant 10: Redis is a cache, never the record).
 *
 * - A claim whose key has a verified entry gets the entry as the row's snapshot, and the
 *   engine judges it by its one decision tree (`decide`): 422 for another fingerprint first
 *   (Invariant 5), else the stored response of a settled key, or 409 for a claim in flight. Only
 *   entries that tree answers without a write are served; a miss, an entry not ours, an
 *   expired one and any Redis error go to the store. The cache never says a key is new.
 * - What the store answers is remembered: a claim in flight (living within the time before it
 *   could go stale), a settled key (expiring before the key), the outcome written by its owner
 *   once committed.
 * - A release or a suspension evicts the key; a completion inside the caller's own transaction,
 *   whose commit the cache cannot see, evicts it too (the next read caches the committed state),
 *   and so does a completion that failed, was refused or whose answer was lost.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis'
 * import { createEngine } from 'oncely'
 * import { createPostgresStore } from 'oncely/postgres'
 * import { createRedisCache, withRedisCache } from 'oncely/redis'
 * declare const pool: import('pg').Pool
 * const cache = createRedisCache({ redis: new Redis({ enableOfflineQueue: false, maxRetriesPerRequest: 0, enableAutoPipelining: true }), secret: process.env.ONCELY_CACHE_SECRET ?? '', staleAfterMs: 30_000 })
 * const engine = createEngine({ store: withRedisCache(createPostgresStore({ pool }), cache), staleAfterMs: 30_000 })
 * ```
 */
export function withRedisCache<Tx, S extends IdempotencyStore<Tx>>(store: S, cache: RedisCache): S {
  const { staleAfterMs } = cache.options
  const held = new Map<string, HeldClaim>()
  // Completions inside a transaction this store opened: announced once it has committed.
  const pending = new WeakMap<object, Array<{ fence: Fence; outcome: FinalOutcome }>>()

  // Tokens are new each time, so the map is in the order claims were taken: the oldest goes
  // first, through one iterator kept between removals. Walking the whole map for expired claims,
  // as before, cost every new claim 80 µs once 10 000 unexpired ones had gathered (issue 21).
  const forgetOldest = oldestFirst(held)
  const hold = (state: ClaimState, fingerprint: string, expiresBy: number) => {
    held.set(state.fenceToken, { claimId: state.claimId, fingerprint, expiresBy })
    if (held.size > MAX_HELD_CLAIMS) forgetOldest()
    // Sent on the client's one connection before any later write for this claim, so an eviction
    // or the outcome always lands after it.
    void cache.rememberInFlight({ scope: state.scope, key: state.key, fingerprint, claimId: state.claimId, leaseAgeMs: 0 }, 0)
  }
  const announce = async (fence: Fence, outcome: FinalOutcome) => {
    const claim = held.get(fence.fenceToken)
    held.delete(fence.fenceToken)
    if (!claim) return cache.evict(fence.scope, fence.key)
    const snapshot = { scope: fence.scope, key: fence.key, status: outcome.status, fingerprint: claim.fingerprint, claimId: claim.claimId, response: outcome.response }
    await cache.rememberSettled({ ...snapshot, expiresInMs: claim.expiresBy - performance.now() }, 0, true)
  }
  const letGo = async (fence: Fence, evict: boolean) => {
    held.delete(fence.fenceToken)
    if (evict) await cache.evict(fence.scope, fence.key)
    return evict
  }
  const remember = (snapshot: ClaimSnapshot, elapsedMs: number) => {
    if (snapshot.status !== 'in_progress') {
      if (snapshot.response) void cache.rememberSettled({ ...snapshot, status: snapshot.status, response: snapshot.response }, elapsedMs, false)
    } else if (snapshot.fenceToken !== null && snapshot.leaseAgeMs !== null) {
      void cache.rememberInFlight({ ...snapshot, leaseAgeMs: snapshot.leaseAgeMs }, elapsedMs)
    }
  }

  const cached: Partial<IdempotencyStore<Tx>> = {
    async claim(request: ClaimRequest): Promise<ClaimAttempt> {
      const entry = await cache.read(request.scope, request.key)
      if (entry) {
        const snapshot = snapshotOf(request, entry)
        // Only what the decision tree answers without a write: a take-over or a reclaim must
        // be judged on the row itself.
        const decision = decide(snapshot, request, { staleAfterMs, leaseRenewMs: staleAfterMs, conflictRetryAfterMs: 0 })
        if (decision.kind === 'replay' || decision.kind === 'mismatch' || decision.kind === 'conflict') return { kind: 'existing', snapshot }
      }
      const sentAt = performance.now()
      const attempt = await store.claim(request)
      if (attempt.kind === 'inserted') hold(attempt.claim, request.fingerprint, sentAt + request.ttlMs)
      else remember(attempt.snapshot, performance.now() - sentAt)
      return attempt
    },
    async takeOver(seen: ClaimSnapshot, take: TakeOverInput) {
      const sentAt = performance.now()
      const state = await store.takeOver(seen, take)
      if (state) hold(state, seen.fingerprint, sentAt + take.ttlMs)
      return state
    },
    async reclaimExpired(seen: ClaimSnapshot, request: ReclaimInput) {
      const sentAt = performance.now()
      const state = await store.reclaimExpired(seen, request)
      if (state) hold(state, request.fingerprint, sentAt + request.ttlMs)
      return state
    },
    async complete(fence: Fence, completion: StoreCompletion<Tx>) {
      let done: boolean
      try {
        done = await store.complete(fence, completion)
      } catch (error) {
        // Unknown (a lost answer): the completion may have landed, the in-flight entry be wrong;
        // a flight rolled back leaves an in-flight entry that may now be wrong too.
        await letGo(fence, true)
        throw error
      }
      // The fence gone, maybe by this worker's own completion whose answer was lost (issue 22):
      // the in-flight entry may be wrong either way.
      if (!done) return letGo(fence, true).then(() => false)
      const { tx, status, response } = completion
      const outcome: FinalOutcome = { status, response }
      // Alone, or a flight committed with its COMMIT: the settled entry replaces any in-flight one.
      if (tx === undefined) {
        await announce(fence, outcome)
        return true
      }
      const ours = typeof tx === 'object' && tx !== null ? pending.get(tx) : undefined
      if (ours) ours.push({ fence, outcome })
      // In the caller's own transaction the commit is still to come, or may never: evict.
      else await letGo(fence, true)
      return true
    },
    async transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T> {
      let completions: Array<{ fence: Fence; outcome: FinalOutcome }> = []
      // Each attempt's handle leaves the map when the transaction ends: an entry left to the
      // WeakMap's own clearing kept its completions (and their responses) through V8's young
      // collections until a full one (issue 21).
      const handles: object[] = []
      try {
        const value = await store.transaction(async (tx) => {
          completions = []
          if (typeof tx === 'object' && tx !== null) {
            pending.set(tx, completions)
            handles.push(tx)
          }
          return work(tx)
        })
        for (const { fence, outcome } of completions) await announce(fence, outcome)
        return value
      } catch (error) {
        // Rolled back, or unknown (a lost COMMIT answer): whatever the cache held may be wrong.
        for (const { fence } of completions) await letGo(fence, true)
        throw error
      } finally {
        for (const tx of handles) pending.delete(tx)
      }
    },
    release: async (fence: Fence) => letGo(fence, await store.release(fence)),
    suspend: async (fence: Fence, outcomeError?: string) => letGo(fence, await store.suspend(fence, outcomeError)),
  }
  return decorateStore(store, cached)
}

/**
 * The row as the entry describes it, its times aged since the entry was written (by Redis's
 * clock). Written out for each kind, not spread from a common part: two spreads were the cached
 * replay's function with the most self time of its own (issue 21).
 */
function snapshotOf(request: ClaimRequest, entry: CacheEntry): ClaimSnapshot {
  const { scope, key } = request
  if (entry.kind === 'settled') {
    return {
      scope,
      key,
      status: entry.status,
      fingerprint: entry.fingerprint,
      claimId: entry.claimId,
      fenceToken: null,
      recoveryPoint: null,
      stepResults: {},
      startedSteps: [],
      interrupted: false,
      outcomeError: null,
      response: entry.response,
      ageMs: 0,
      leaseAgeMs: null,
      expiresInMs: entry.remainingMs,
    }
  }
  return {
    scope,
    key,
    status: 'in_progress',
    fingerprint: entry.fingerprint,
    claimId: entry.claimId,
    fenceToken: NO_TOKEN,
    recoveryPoint: null,
    stepResults: {},
    startedSteps: [],
    interrupted: false,
    outcomeError: null,
    response: null,
    ageMs: 0,
    leaseAgeMs: entry.leaseAgeMs,
    expiresInMs: entry.remainingMs,
  }
}
