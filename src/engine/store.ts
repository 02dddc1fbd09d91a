import type { ClaimAttempt, ClaimSnapshot, ClaimState, StoredResponse, WriteStatement } from './types.js'

/** One claim statement: insert the key, or report the row that is there. */
export interface ClaimRequest {
  scope: string
  key: string
  /** The fingerprint to store with a new claim. */
  fingerprint: string
  /** How long a new key is remembered. */
  ttlMs: number
  /**
   * The identity and fence token of the claim, minted by the caller (Invariant 3): after an
   * ambiguous error the caller recognises its own row by them.
   */
  claimId: string
  fenceToken: string
  /**
   * The stale threshold the claim is made under, recorded with it: nobody takes it over before
   * its lease is this old, whatever threshold they judge by themselves (issue 22). (Default: none
   * recorded; takers judge by their own)
   */
  staleAfterMs?: number
  /**
   * Called when an attempt the store gave up on (no answer within its timeout) turns out later
   * to have inserted the claim: the caller releases it if it no longer waits for it, so a request
   * answered 503 never leaves a claim behind. (Default: none)
   */
  onLateInsert?: () => void
}

/**
 * The part of a snapshot a take-over or a reclaim compares (a whole `ClaimSnapshot` will do):
 * the claim's identity and the token its holder had, null when it was suspended.
 */
export type SeenClaim = Pick<ClaimSnapshot, 'scope' | 'key' | 'claimId' | 'fenceToken'>

/** What a take-over needs besides the snapshot it judged. */
export interface TakeOverInput {
  /** The new holder's token, minted by the caller. */
  fenceToken: string
  /**
   * The staleness the snapshot was judged by; re-checked in the statement, together with the
   * threshold the claim was made under when it recorded one (the greater wins), and recorded as
   * the claim's threshold from now on.
   */
  staleAfterMs: number
  /** The key is remembered at least this long after the take-over. */
  ttlMs: number
}

/** What reclaiming an expired, settled key needs besides the snapshot it judged. */
export interface ReclaimInput {
  fingerprint: string
  ttlMs: number
  /** The stale threshold the new claim is made under, as `ClaimRequest.staleAfterMs`. (Default: none recorded) */
  staleAfterMs?: number
  claimId: string
  fenceToken: string
}

/** The fence every write after the claim carries (Invariant 3). */
export interface Fence {
  scope: string
  key: string
  fenceToken: string
}

/** Step results not yet committed (`commit: 'with-next-write'`), in the order they ran. */
export interface CarriedSteps {
  /** Step name → the result in its stored form. */
  stepResults: Record<string, unknown>
  /** The last of them: the recovery point once they commit. */
  recoveryPoint: string
}

/** The claim a waiting duplicate watches (issue 23): its identity, which a take-over keeps. */
export type WatchedClaim = Pick<ClaimSnapshot, 'scope' | 'key' | 'claimId'>

/** A waiting duplicate's wake-up (issue 23): a hint that the claim may have ended; the row stays the truth. */
export interface ClaimWatch {
  /**
   * True while the claim's end will wake the waiter (for PostgreSQL: the LISTEN connection is up
   * and the row marked), so the waiter may read the row seldom; false before and after.
   */
  readonly live: boolean
  /** Stops watching; the store lets its LISTEN connection go once nobody watches. */
  stop(): void
}

/** A final outcome to store: `completed`, or `failed` (a failure that must be replayed). */
export interface FinalOutcome {
  status: 'completed' | 'failed'
  response: StoredResponse
}

/**
 * One completion for the store (`IdempotencyStore.complete`): the outcome, and where it commits.
 * Alone on the store's own connection; with `tx`, inside that open transaction (the caller's, or
 * one from `transaction`), so it commits with the business rows; with `statements`, in a
 * transaction of the store's sent as one flight with them. Never both. `commit: true` says the
 * completion is the last statement of `tx`, a transaction from the store's own `transaction`: the
 * store may send the COMMIT with it (one round trip for both; the PostgreSQL store does on a `pg`
 * connection), and must then commit nothing when the fence is lost. A store may ignore it: the
 * transaction commits when its work ends, as without it.
 */
export type StoreCompletion<Tx> = FinalOutcome & ({ tx?: Tx; commit?: boolean; statements?: never } | { statements: readonly WriteStatement[]; tx?: never; commit?: never })

/**
 * The port between the engine and its storage: single statements, no decisions (the engine
 * decides, `decide.ts`). Every method takes the scope. Fenced methods resolve to `false` when
 * the fence token no longer matches, and change nothing then. `Tx` is the store's transaction
 * handle (for PostgreSQL, a `Queryable`); the engine passes it through without looking inside.
 *
 * Completion is one method, `complete`, given a `StoreCompletion`: one fenced statement, run on
 * the store's own connection or inside a transaction, the caller's (`tx`) or one the store opens
 * (`transaction`), so business rows and the completion commit together (Invariant 8); or, with
 * `statements`, the same statement in a transaction sent whole with those writes, where the fence
 * is checked in the database because nothing waits for the row count before the COMMIT.
 */
export interface IdempotencyStore<Tx = unknown> {
  /** Inserts a new claim, or returns a snapshot of the row that is there (Invariant 1). */
  claim(request: ClaimRequest): Promise<ClaimAttempt>
  /** Reads the key's row, or null when there is none. */
  read(scope: string, key: string): Promise<ClaimSnapshot | null>
  /**
   * Takes an `in_progress` claim over by a compare-and-swap on the token in `seen` (Invariant 4):
   * of all callers that saw the same snapshot, one wins; a lease renewed meanwhile matches none.
   * Re-checks staleness in the database's clock, keeps the claim's identity (so step keys are
   * the same), marks it interrupted and pushes its expiry to at least `ttlMs` from now.
   * Resolves to the new holder's state, or null when the claim changed since `seen`. Any
   * process may call it with a snapshot it read, the reconciler included: pass the staleness it
   * requires (never below the engine's `staleAfterMs`, or a live owner could lose its claim) and
   * a token minted with `crypto.randomUUID()`.
   *
   * @example
   * ```ts
   * import { randomUUID } from 'node:crypto'
   * const seen = await store.read('42', 'order-42')
   * const claim = seen && (await store.takeOver(seen, { fenceToken: randomUUID(), staleAfterMs: 180_000, ttlMs: 86_400_000 }))
   * ```
   */
  takeOver(seen: SeenClaim, take: TakeOverInput): Promise<ClaimState | null>
  /**
   * Resets a completed or failed key past its TTL to a fresh claim with a new identity. Never
   * matches an `in_progress` claim (Invariant 11). Null when it is no longer expired or settled.
   */
  reclaimExpired(seen: SeenClaim, request: ReclaimInput): Promise<ClaimState | null>
  /**
   * Commits one step's result and moves the recovery point; `carried`, earlier results whose
   * commit was deferred, commit in the same statement.
   */
  commitStep(fence: Fence, step: string, result: unknown, carried?: CarriedSteps): Promise<boolean>
  /**
   * Records an at-most-once step as started, before its function runs; `carried` results commit
   * in the same statement and move the recovery point to their last.
   */
  markStepStarted(fence: Fence, step: string, carried?: CarriedSteps): Promise<boolean>
  /** Renews the lease (`locked_at`) so a live owner never looks stale, nor expires. */
  renewLease(fence: Fence, ttlMs: number): Promise<boolean>
  /**
   * Stores the outcome and ends the claim: on the store's connection; or inside `completion.tx`
   * (the caller's open transaction, or one from `transaction`) so it commits with the business
   * rows; or with `completion.statements` in one transaction of the store's, sent as one flight:
   * BEGIN, the fenced completion, the statements in order, COMMIT, none waiting for another's
   * answer (one round trip where the connection pipelines). There a lost fence fails in the
   * database and rolls the statements back: resolves to `false` then, with nothing committed; a
   * failing statement rejects with its error.
   */
  complete(fence: Fence, completion: StoreCompletion<Tx>): Promise<boolean>
  /** Runs `work` inside BEGIN … COMMIT on the store's own connection, rolling back on any error. */
  transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>
  /**
   * Optional: runs one business write given as a statement (`{ text, values }`) on `tx`, a
   * transaction of this store's, so an adapter can run it in its turn among writes given as
   * functions without knowing what `tx` is. A store whose transactions take no SQL leaves it
   * out; such a statement is then refused.
   */
  runStatement?(tx: Tx, statement: WriteStatement): Promise<void>
  /**
   * Optional (issue 23): calls `wake` when the claim may have ended (completed, failed, released,
   * suspended), or when such news may have been missed, so a duplicate waiting for it (`waitMs`)
   * reads the row at once. Never throws and costs the claim's owner nothing unless someone
   * watches; a store without it, or a watch never `live`, is polled alone.
   */
  watchClaim?(claim: WatchedClaim, wake: () => void): ClaimWatch
  /** Deletes a claim nobody can have acted on: the key may be retried as new. */
  release(fence: Fence): Promise<boolean>
  /**
   * Gives the claim up but keeps its recovery point: the next retry takes it over at once. With
   * `outcomeError`, records why the outcome could not be stored.
   */
  suspend(fence: Fence, outcomeError?: string): Promise<boolean>
  /**
   * True for an error after which the same statement may be sent again: a lost connection, a
   * serialization failure, a deadlock, a lock or statement timeout, a server shutting down. Such
   * an error may hide a commit: the engine recognises its own write before writing again.
   */
  isTransientError(error: unknown): boolean
}

export type { ClaimState }
