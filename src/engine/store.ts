import type { ClaimResult, ClaimState, IdempotencyRequest, StoredResponse } from './types.js'

/** Timing the store needs to decide staleness and expiry in the database's own clock. */
export interface ClaimTiming {
  /** How long a key is remembered. */
  ttlMs: number
  /** An `in_progress` claim whose lease is older than this may be taken over. */
  staleAfterMs: number
}

/** The fence every write after the claim carries (Invariant 3). */
export interface Fence {
  scope: string
  key: string
  fenceToken: string
}

/** A final outcome to store: `completed`, or `failed` (a failure that must be replayed). */
export interface FinalOutcome {
  status: 'completed' | 'failed'
  response: StoredResponse
}

/**
 * The port between the engine and its storage: only what the state machine needs, every method
 * taking the scope. Fenced methods resolve to `false` when the fence token no longer matches,
 * and change nothing then. `Tx` is the store's transaction handle (for PostgreSQL, a
 * `Queryable`); the engine passes it through without looking inside.
 */
export interface IdempotencyStore<Tx = unknown> {
  /** Claims the key, takes over a stale claim, or reports what is there. */
  claim(request: IdempotencyRequest, timing: ClaimTiming): Promise<ClaimResult>
  /** Commits one phase's result and moves the recovery point. */
  commitPhase(fence: Fence, phase: string, result: unknown): Promise<boolean>
  /** Renews the lease (`locked_at`) so a live owner never looks stale. */
  renewLease(fence: Fence, ttlMs: number): Promise<boolean>
  /**
   * Stores the outcome and ends the claim. With `tx`, runs inside the caller's open transaction
   * so the caller's business writes and the completion commit together (Invariant 8).
   */
  complete(fence: Fence, outcome: FinalOutcome, tx?: Tx): Promise<boolean>
  /** Runs `work` in a transaction on the store's pool, then completes in that same transaction. */
  completeInTransaction<T>(fence: Fence, work: (tx: Tx) => Promise<{ outcome: FinalOutcome; value: T }>): Promise<{ completed: boolean; value: T }>
  /** Deletes the claim: nothing happened, the key may be retried as new. */
  release(fence: Fence): Promise<boolean>
  /** Gives the claim up but keeps its recovery point: the next retry resumes at once. */
  suspend(fence: Fence): Promise<boolean>
}

export type { ClaimState }
