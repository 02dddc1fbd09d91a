/**
 * Terminology, used the same way in every file of oncely:
 *
 * - **key**: the `Idempotency-Key` a client sends, naming one logical operation. Stored per
 *   scope (the user), never alone: the same key from two users is two operations.
 * - **scope**: whose key it is; the user or account id as text.
 * - **claim**: the row that says "this operation is running". Made by one `INSERT … ON CONFLICT
 *   DO NOTHING`, committed before any side effect. Its `claimId` is its identity: a take-over
 *   keeps it, a key reused after expiry gets a new one.
 * - **fingerprint**: SHA-256 of the canonical JSON of the request's meaningful parts; a request
 *   whose fingerprint differs from the stored one is a mismatch.
 * - **replay**: answering a repeated request with the stored response, byte for byte.
 * - **step**: one named part of a handler; one that calls the outside world runs
 *   outside any transaction with a key derived from the claim.
 * - **recovery point**: the last step whose result is committed; a retry resumes after it.
 * - **take-over**: a retry becoming the owner of a stale claim (its worker died, or suspended
 *   it), by one compare-and-swap on the fence token.
 * - **fence token**: the random token a claim's owner holds; every write after the claim
 *   carries it and succeeds only if it still matches.
 */

/** A stored response, replayed verbatim. */
export interface StoredResponse {
  status: number
  /** Header name/value pairs in the order first sent. */
  headers: ReadonlyArray<readonly [string, string]>
  /** The body's exact bytes. */
  body: Uint8Array
}

/** What identifies one request to the engine. */
export interface IdempotencyRequest {
  /** Whose key it is (user or account id). */
  scope: string
  /** The idempotency key, already validated (see `parseIdempotencyKey`). */
  key: string
  /** The request fingerprint (see `fingerprintRequest`). */
  fingerprint: string
  /** The fingerprint by the earlier rules, asked for only when the stored one was made by one (`BeginInput`). */
  earlierFingerprint?: () => string
}

/** The state a claim carries into an execution: where to resume from. */
export interface ClaimState {
  scope: string
  key: string
  /** The claim's identity; part of every derived step key. */
  claimId: string
  /** The fence token this owner holds. */
  fenceToken: string
  /** The last committed step, or null before any. */
  recoveryPoint: string | null
  /** Results of committed steps, by step name, in their stored form. */
  stepResults: Readonly<Record<string, unknown>>
  /** At-most-once steps recorded as started; a resumed run skips them. */
  startedSteps: readonly string[]
  /**
   * The claim was taken over or suspended at some time: an earlier owner may have acted on it
   * (entered a step whose result never committed), so it is never deleted (Invariant 11).
   */
  interrupted: boolean
}

/** How the owner of a key came to own it. */
export type ClaimKind = 'new' | 'take-over' | 'reclaimed-expired'

/**
 * A key's row as the store read it, with its times measured in the database's clock at the
 * read. The engine judges it with `decide`; a cache may hold one and judge it by the same tree,
 * passing the time elapsed since it was read.
 */
export interface ClaimSnapshot {
  scope: string
  key: string
  status: 'in_progress' | 'completed' | 'failed'
  /** The fingerprint stored with the key (as `fingerprintRequest` made it, any version). */
  fingerprint: string
  claimId: string
  /**
   * The token of the claim's current holder; null while a suspended claim waits for a retry.
   * On a completed or failed key, the token of the worker that stored the outcome.
   */
  fenceToken: string | null
  recoveryPoint: string | null
  stepResults: Readonly<Record<string, unknown>>
  startedSteps: readonly string[]
  /** The stored response of a completed or failed key, else null. */
  response: StoredResponse | null
  /** Taken over or suspended at some time (see `ClaimState.interrupted`). */
  interrupted: boolean
  /** Why the outcome could not be stored, for a claim suspended by that failure; else null. */
  outcomeError: string | null
  /**
   * The stale threshold the claim was made under, or null (a claim made by an older oncely, or
   * by a store that records none): `decide` waits for the greater of it and its own (issue 22).
   */
  staleAfterMs?: number | null
  /** Milliseconds since the claim was created (take-overs keep it). */
  ageMs: number
  /** Milliseconds since the lease was last renewed, or null if it never was. */
  leaseAgeMs: number | null
  /** Milliseconds until the key expires; zero or less once it has. */
  expiresInMs: number
}

/**
 * How a claim ended, or `running` while it is held. `lost`: this worker may no longer write —
 * the claim was taken over, or this worker gave it up (the database stayed away past its lease,
 * or the handler ran past `handlerDeadlineMs`); a retry takes it over once stale.
 */
export type ExecutionState = 'running' | 'completed' | 'failed' | 'released' | 'suspended' | 'lost'

/** The store's answer to the claim statement: the row was inserted, or here is what is there. */
export type ClaimAttempt = { kind: 'inserted'; claim: ClaimState } | { kind: 'existing'; snapshot: ClaimSnapshot }

/**
 * A business write given as one SQL statement instead of a function: `complete` and `fail` send
 * such writes with the completion in one flight (`CompletionOptions.statements`). `values` are
 * bound parameters; `name` prepares the statement once per connection.
 *
 * @example
 * ```ts
 * import type { WriteStatement } from 'oncely'
 * const insertCharge: WriteStatement = { text: 'INSERT INTO charges (id) VALUES ($1)', values: ['ch_1'] }
 * await execution.complete(response, { statements: [insertCharge] })
 * ```
 */
export interface WriteStatement {
  text: string
  values?: readonly unknown[]
  name?: string
}
