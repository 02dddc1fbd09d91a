import { OncelyError } from '../errors.js'
import { fingerprintsMatch } from './fingerprint.js'
import type { ClaimSnapshot, StoredResponse } from './types.js'

/** The timing a decision is judged by, in milliseconds. */
export interface DecisionTiming {
  /** An `in_progress` claim whose lease is this old may be taken over. */
  staleAfterMs: number
  /** How often a live owner renews its lease: an older lease means the owner missed a renewal. */
  leaseRenewMs: number
  /** The `Retry-After` of a conflict while the owner keeps renewing. */
  conflictRetryAfterMs: number
}

/** A key's row as a client is told of it: a claim held (`running`) or waiting (`suspended`), or its outcome. */
export type KeyState = 'running' | 'suspended' | 'completed' | 'failed'

/** The state of a key's row: an `in_progress` claim without a holder is suspended. */
export function keyStateOf(snapshot: Pick<ClaimSnapshot, 'status' | 'fenceToken'>): KeyState {
  if (snapshot.status !== 'in_progress') return snapshot.status
  return snapshot.fenceToken === null ? 'suspended' : 'running'
}

/** What to do with a request whose key already has a row. */
export type SnapshotDecision =
  /** A settled key past its TTL: it is a new request, claimed again under a new identity. */
  | { kind: 'reclaim-expired' }
  /** The key was used with a different request: 422, whatever the state (Invariant 5), which it names. */
  | { kind: 'mismatch'; state: KeyState }
  /** The key completed or failed: answer with its stored response, verbatim. */
  | { kind: 'replay'; response: StoredResponse }
  /** A suspended claim, or one whose owner stopped renewing: take it over with its identity. */
  | { kind: 'take-over' }
  /** A live claim: 409, retry after this many milliseconds. */
  | { kind: 'conflict'; retryAfterMs: number }

/**
 * Judges a key's row for an incoming request: the one decision tree of oncely, with no I/O. The
 * store feeds it the row the claim statement saw; a cache holding a snapshot passes the
 * milliseconds elapsed since the snapshot was read, so a cached claim ages as the row does.
 *
 * - A settled (completed or failed) key past its TTL is a new request.
 * - Mismatch before replay, conflict or take-over (Invariant 5).
 * - An `in_progress` claim is never reclaimed as expired, however old (Invariant 11): past its
 *   stale threshold (or suspended) it is taken over with its identity, else it is a conflict. The
 *   threshold is the greater of `timing.staleAfterMs` and the one the claim was made under.
 * - The conflict's `Retry-After` is honest: about `conflictRetryAfterMs` while the owner keeps
 *   renewing; once it has missed a renewal, the time until the claim can be taken over.
 *
 * @example
 * ```ts
 * import { decide, type ClaimSnapshot } from 'oncely'
 * declare const snapshot: ClaimSnapshot
 * const decision = decide(snapshot, { fingerprint: snapshot.fingerprint }, { staleAfterMs: 90_000, leaseRenewMs: 30_000, conflictRetryAfterMs: 1000 })
 * if (decision.kind === 'replay') console.log(decision.response.status)
 * ```
 */
export function decide(snapshot: ClaimSnapshot, request: { fingerprint: string; earlierFingerprint?: () => string }, timing: DecisionTiming, elapsedMs = 0): SnapshotDecision {
  const settled = snapshot.status !== 'in_progress'
  if (settled && snapshot.expiresInMs - elapsedMs <= 0) return { kind: 'reclaim-expired' }
  if (!sameRequest(snapshot.fingerprint, request)) return { kind: 'mismatch', state: keyStateOf(snapshot) }
  if (settled) {
    if (snapshot.response === null) {
      throw new OncelyError('ONCELY_STORE_UNEXPECTED', `key ${JSON.stringify(snapshot.key)} is ${snapshot.status} but has no stored response`)
    }
    return { kind: 'replay', response: snapshot.response }
  }
  // Invariant 4: a suspended claim (no holder) is takeable at once; a held one once stale.
  if (snapshot.fenceToken === null || snapshot.leaseAgeMs === null) return { kind: 'take-over' }
  const leaseAgeMs = snapshot.leaseAgeMs + elapsedMs
  // Issue 22: the owner renews on the schedule of the threshold it claimed under; a taker with a
  // smaller one still waits for that one.
  const judged = { ...timing, staleAfterMs: Math.max(timing.staleAfterMs, snapshot.staleAfterMs ?? 0) }
  if (leaseAgeMs >= judged.staleAfterMs) return { kind: 'take-over' }
  return { kind: 'conflict', retryAfterMs: retryAfterMs(leaseAgeMs, judged) }
}

/**
 * A renewing owner's lease is at most `leaseRenewMs` old (plus a statement's latency, allowed for
 * by half a period); past that it missed a renewal, and the honest hint is the time until stale.
 */
function retryAfterMs(leaseAgeMs: number, timing: DecisionTiming): number {
  const missedRenewal = leaseAgeMs > timing.leaseRenewMs * 1.5
  if (!missedRenewal) return timing.conflictRetryAfterMs
  return Math.max(timing.conflictRetryAfterMs, timing.staleAfterMs - leaseAgeMs)
}

/** The stored fingerprint names this request: by the current rule, or else by the earlier ones, made only now. */
function sameRequest(stored: string, request: { fingerprint: string; earlierFingerprint?: () => string }): boolean {
  if (fingerprintsMatch(stored, request.fingerprint)) return true
  return request.earlierFingerprint !== undefined && fingerprintsMatch(stored, request.earlierFingerprint())
}
