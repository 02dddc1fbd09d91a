import { jitterMs } from '../backoff.js'
import { claimKey, type ClaimOutcome } from './claim.js'
import { decide } from './decide.js'
import type { ResolvedEngineOptions } from './options.js'
import type { ClaimWatch } from './store.js'
import type { ClaimSnapshot, IdempotencyRequest } from './types.js'

/** How a duplicate whose key is in use may wait for the first request instead of a 409. */
export interface WaitOptions {
  /**
   * How long, at most, to wait for the claim in flight to finish before answering 409. While it
   * waits the engine holds no database connection: the store wakes it when the claim ends, where it
   * can (LISTEN/NOTIFY), and it reads the key's row now and then, the truth either way (capped
   * backoff with jitter; seldom while the store's wake-up is live). (Default: 0, answer 409 at once)
   */
  waitMs?: number
  /** Stops the wait early (the client went away): the answer is then the 409 it would have had. (Default: none) */
  signal?: AbortSignal
}

type Conflict = Extract<ClaimOutcome, { kind: 'conflict' }>

/**
 * Waits out a conflict: reads the row with capped, jittered backoff, or, while the store's watch
 * on the claim is live, seldom and on each wake-up, until the claim in flight is settled, gone or
 * takeable, or `waitMs` has passed. A settled key is answered from the row read (the record, never
 * a cache: `store.read` is PostgreSQL's); a key gone or takeable goes back through `claimKey`, so
 * ownership is still decided by its one statement (Invariant 1) or its compare-and-swap
 * (Invariant 4). Past the bound, the 409's hint is judged on the last row read.
 */
export async function waitOutConflict<Tx>(request: IdempotencyRequest, first: Conflict, options: ResolvedEngineOptions<Tx>, wait: WaitOptions): Promise<ClaimOutcome> {
  const { store } = options
  const waitMs = wait.waitMs ?? 0
  const deadline = performance.now() + waitMs
  const timing = { staleAfterMs: options.staleAfterMs, leaseRenewMs: options.leaseRenewMs, conflictRetryAfterMs: options.conflictRetryAfterSeconds * 1000 }
  const alarm = new Alarm()
  let last: Conflict = first
  let watch = watchClaim(store, request, first.claimId, alarm)
  let pauseMs = options.waitFirstPollMs
  try {
    for (;;) {
      const remaining = deadline - performance.now()
      if (remaining <= 0 || wait.signal?.aborted) return last
      if (watch?.live) await alarm.pause(Math.min(jittered(options.waitWatchedPollMs), remaining), wait.signal)
      else {
        await alarm.pause(Math.min(jittered(pauseMs), remaining), wait.signal)
        pauseMs = Math.min(pauseMs * 2, options.waitMaxPollMs)
      }
      if (wait.signal?.aborted) return last
      let snapshot: ClaimSnapshot | null
      try {
        snapshot = await store.read(request.scope, request.key)
      } catch (error) {
        // A blip while waiting changes nothing we know: the claim was in flight; read again.
        if (store.isTransientError(error)) continue
        throw error
      }
      const decision = snapshot === null ? undefined : decide(snapshot, request, timing)
      if (decision?.kind === 'replay' || decision?.kind === 'mismatch') return decision
      let next: Conflict
      if (snapshot !== null && decision?.kind === 'conflict') {
        next = { kind: 'conflict', retryAfterSeconds: Math.ceil(decision.retryAfterMs / 1000), claimId: snapshot.claimId }
      } else {
        // Released, swept, stale or expired: claim as any request would; another may win it.
        const outcome = await claimKey(request, options)
        if (outcome.kind !== 'conflict') return outcome
        next = outcome
      }
      // Another claim holds the key now (the first let it go, another waiter won it): watch that one.
      if (next.claimId !== last.claimId) {
        watch?.stop()
        watch = watchClaim(store, request, next.claimId, alarm)
      }
      last = next
    }
  } finally {
    watch?.stop()
  }
}

function watchClaim<Tx>(store: ResolvedEngineOptions<Tx>['store'], request: IdempotencyRequest, claimId: string, alarm: Alarm): ClaimWatch | undefined {
  return store.watchClaim?.({ scope: request.scope, key: request.key, claimId }, () => alarm.ring())
}

/** Full jitter on the upper half: duplicates that arrived together do not read together. */
function jittered(ms: number): number {
  return jitterMs('equal', ms)
}

/** A pause the store's wake-up ends early; a ring while no pause runs ends the next one at once. */
class Alarm {
  #rung = false
  #wakeUp: (() => void) | undefined

  ring(): void {
    this.#rung = true
    this.#wakeUp?.()
  }

  pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', done)
        this.#wakeUp = undefined
        this.#rung = false
        resolve()
      }
      const timer = setTimeout(done, ms)
      signal?.addEventListener('abort', done, { once: true })
      this.#wakeUp = done
      if (this.#rung) done()
    })
  }
}
