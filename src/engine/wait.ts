import { jitterMs } from '../backoff.js'
import { claimKey, type ClaimOutcome } from './claim.js'
import { decide } from './decide.js'
import type { ResolvedEngineOptions } from './options.js'
import type { ClaimSnapshot, IdempotencyRequest } from './types.js'

/** How a duplicate whose key is in use may wait for the first request instead of a 409. */
export interface WaitOptions {
  /**
   * How long, at most, to wait for the claim in flight to finish before answering 409. While it
   * waits the engine holds no database connection: it reads the key's row now and then (capped
   * backoff with jitter). (Default: 0, answer 409 at once)
   */
  waitMs?: number
  /** Stops the wait early (the client went away): the answer is then the 409 it would have had. (Default: none) */
  signal?: AbortSignal
}

/** The first pause between two reads of the row, and the cap the pauses double up to. */
export const FIRST_POLL_MS = 10
export const MAX_POLL_MS = 200

type Conflict = Extract<ClaimOutcome, { kind: 'conflict' }>

/**
 * Waits out a conflict: reads the row with capped, jittered backoff until the claim in flight is
 * settled, gone or takeable, or `waitMs` has passed. A settled key is answered from the row read
 * (the record, never a cache: `store.read` is PostgreSQL's); a key gone or takeable goes back
 * through `claimKey`, so ownership is still decided by its one statement (Invariant 1) or its
 * compare-and-swap (Invariant 4). Past the bound, the 409's hint is judged on the last row read.
 */
export async function waitOutConflict<Tx>(request: IdempotencyRequest, first: Conflict, options: ResolvedEngineOptions<Tx>, wait: WaitOptions): Promise<ClaimOutcome> {
  const { store } = options
  const waitMs = wait.waitMs ?? 0
  const deadline = performance.now() + waitMs
  const timing = { staleAfterMs: options.staleAfterMs, leaseRenewMs: options.leaseRenewMs, conflictRetryAfterMs: options.conflictRetryAfterSeconds * 1000 }
  let last: Conflict = first
  let pauseMs = FIRST_POLL_MS
  for (;;) {
    const remaining = deadline - performance.now()
    if (remaining <= 0 || wait.signal?.aborted) return last
    await pause(Math.min(jittered(pauseMs), remaining), wait.signal)
    pauseMs = Math.min(pauseMs * 2, MAX_POLL_MS)
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
    if (decision?.kind === 'conflict') {
      last = { kind: 'conflict', retryAfterSeconds: Math.ceil(decision.retryAfterMs / 1000) }
      continue
    }
    // Released, swept, stale or expired: claim as any request would; another may win it.
    const outcome = await claimKey(request, options)
    if (outcome.kind !== 'conflict') return outcome
    last = outcome
  }
}

/** Full jitter on the upper half: duplicates that arrived together do not read together. */
function jittered(ms: number): number {
  return jitterMs('equal', ms)
}

function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}
