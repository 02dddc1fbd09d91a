import { invalid, optionalFunction } from '../option-validation.js'
import type { FencedWriter } from './fenced-write.js'
import type { Fence, FinalOutcome, IdempotencyStore } from './store.js'
import type { ClaimSnapshot, StoredResponse, WriteStatement } from './types.js'

/** Where `complete` and `fail` store the outcome besides the store's own connection. */
export interface CompletionOptions<Tx> {
  /**
   * Your open transaction: the completion commits or rolls back with it (Invariant 8). One
   * attempt; your code owns the transaction's retries. (Default: none)
   */
  tx?: Tx
  /**
   * Business writes to commit with the completion, in a transaction the store opens: the fenced
   * completion is sent first and `writes` behind it, and if the claim was lost everything rolls
   * back with `ONCELY_LOCK_LOST`. Retried like `completeInTransaction`, so `writes` must only
   * write through the `tx` it is given. On a pipelining pool (`new pg.Pool({ pipeline: true })`)
   * writes sent without awaiting each other leave with BEGIN and the completion in one round
   * trip, and the COMMIT in a second; on a plain `pg` pool BEGIN leaves with the completion, then
   * each write and the COMMIT; `statements` saves all but one. Not with `tx`.
   * (Default: none)
   *
   * @example
   * ```ts
   * import { enqueue } from 'oncely/outbox'
   * await execution.complete(response, {
   *   writes: async (tx) => {
   *     await Promise.all([
   *       tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] }),
   *       enqueue(tx, { type: 'charge.succeeded', key: 'cus_1', payload: { id } }),
   *     ])
   *   },
   * })
   * ```
   */
  // A method signature: checked bivariantly, so an Execution<Queryable> is still an Execution<unknown>.
  writes?(this: void, tx: Tx): Promise<void>
  /**
   * Business writes as statements, committed with the completion in a transaction the store
   * opens: BEGIN, the fenced completion, these statements in order and COMMIT leave together, so
   * on a pipelining pool the whole completion is one round trip (issue 11). If the claim was lost,
   * the completion fails in the database and everything rolls back with `ONCELY_LOCK_LOST`; a
   * statement that fails rolls everything back too (`ONCELY_OUTCOME_NOT_RECORDED` with its error
   * as the cause, or a retry of the whole flight when the error is transient). A statement cannot
   * use another's result: where one must, use `writes`. Not with `tx` or `writes`. (Default: none)
   *
   * @example
   * ```ts
   * import { createOutbox } from 'oncely/outbox'
   * const outbox = createOutbox()
   * const event = await outbox.prepareEnqueue({ type: 'charge.succeeded', key: 'cus_1', payload: { id } })
   * await execution.complete(response, {
   *   statements: [{ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] }, event.statement],
   * })
   * ```
   */
  statements?: readonly WriteStatement[]
}

/** What `completeInTransaction`'s work resolves to: the outcome to store, and the value to return. */
export interface CompletionWorkResult<T> {
  response: StoredResponse
  status?: 'completed' | 'failed'
  value: T
}

/** What `completeInTransaction` runs: business writes in `tx`, then the outcome to store with them. */
export type CompletionWork<Tx, T> = (tx: Tx) => Promise<CompletionWorkResult<T>>

// The functions below are method signatures, checked bivariantly, so that an Execution<Queryable>
// is still an Execution<unknown> (as with `CompletionOptions.writes`).
/**
 * One completion, resolved once from what the caller passed (`complete`, `fail` and their
 * options, or `completeInTransaction`): the outcome, and what commits with it.
 */
export type CompletionPlan<Tx, T = undefined> =
  /** On the store's own connection: one fenced write, retried and recognised by read-back. */
  | { kind: 'alone'; outcome: FinalOutcome }
  /** In the caller's open transaction: one attempt, the caller owns its retries. */
  | { kind: 'in-caller-transaction'; outcome: FinalOutcome; tx: Tx }
  /** In a transaction of the store's, the completion sent first and `writes` behind it. */
  | { kind: 'with-writes'; outcome: FinalOutcome; writes(this: void, tx: Tx): Promise<void> }
  /** In a transaction of the store's sent as one flight with `statements`. */
  | { kind: 'with-statements'; outcome: FinalOutcome; statements: readonly WriteStatement[] }
  /** In a transaction of the store's, `work` first and the completion of its outcome behind it. */
  | { kind: 'after-work'; work(this: void, tx: Tx): Promise<CompletionWorkResult<T>> }

/** The plan for `complete` or `fail` with `options`, which are checked here, once. */
export function planCompletion<Tx>(outcome: FinalOutcome, options: CompletionOptions<Tx>): CompletionPlan<Tx> {
  const { tx, writes, statements } = checkCompletionOptions(options)
  if (writes !== undefined) return { kind: 'with-writes', outcome, writes }
  if (statements !== undefined) return { kind: 'with-statements', outcome, statements }
  if (tx !== undefined) return { kind: 'in-caller-transaction', outcome, tx }
  return { kind: 'alone', outcome }
}

function checkCompletionOptions<Tx>(options: CompletionOptions<Tx>): CompletionOptions<Tx> {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  optionalFunction('writes', options.writes)
  if (options.writes !== undefined && options.tx !== undefined) {
    throw invalid('writes', 'must be left out with tx (with your own transaction, write in it and pass it as tx)', options.writes)
  }
  const { statements } = options
  if (statements === undefined) return options
  if (!Array.isArray(statements) || !statements.every(isWriteStatement)) {
    throw invalid('statements', 'must be an array of { text, values? } with text a string and values an array', statements)
  }
  if (options.tx !== undefined || options.writes !== undefined) {
    throw invalid('statements', 'must be left out with tx or writes (put every write in one of them)', statements)
  }
  return options
}

function isWriteStatement(value: unknown): value is WriteStatement {
  // Anything but null and undefined can be destructured, and a primitive has no text.
  const { text, values, name } = (value ?? {}) as Partial<Record<keyof WriteStatement, unknown>>
  return typeof text === 'string' && (values === undefined || Array.isArray(values)) && (name === undefined || typeof name === 'string')
}

/** What carrying a completion out needs of the claim's holder. */
export interface CompletingHolder<Tx> {
  readonly store: IdempotencyStore<Tx>
  readonly fence: Fence
  readonly writer: FencedWriter
  /** The outcome is stored: the holder ends as `completed` or `failed`. */
  ended(status: 'completed' | 'failed'): void
  /** The fence failed: someone else holds the claim. Throws `ONCELY_LOCK_LOST`. */
  lost(): never
  /** The outcome could not be stored: what to throw (issue 8, path 15). */
  notRecorded(error: unknown): Promise<unknown>
}

/** Thrown inside the completion transaction to roll it back when the fence fails. */
class LockLostSignal extends Error {}

/**
 * Carries `plan` out: stores the outcome and ends the holder, or throws `ONCELY_LOCK_LOST` when
 * the claim was taken over (nothing of this holder's lands then), or what `notRecorded` makes of
 * any other failure. Resolves to the value `work` returned, for an `after-work` plan.
 */
export async function complete<Tx, T>(holder: CompletingHolder<Tx>, plan: CompletionPlan<Tx, T>): Promise<T> {
  try {
    if (plan.kind === 'alone' || plan.kind === 'in-caller-transaction') {
      const { outcome } = plan
      const ok =
        plan.kind === 'alone'
          ? await holder.writer.write(
              `storing the ${outcome.status} outcome`,
              () => holder.store.complete(holder.fence, outcome),
              (row) => settledBy(holder.fence, row, outcome.status),
            )
          : await holder.store.complete(holder.fence, { ...outcome, tx: plan.tx })
      if (!ok) throw new LockLostSignal()
      holder.ended(outcome.status)
      return undefined as T
    }
    return await landing(holder, plan)
  } catch (error) {
    if (error instanceof LockLostSignal) holder.lost()
    throw await holder.notRecorded(error)
  }
}

type OwnTransaction<Tx, T> = Extract<CompletionPlan<Tx, T>, { kind: 'with-writes' | 'with-statements' | 'after-work' }>

/** The status an own-transaction attempt stores: an `after-work` plan's is known once its work ran. */
interface Attempt {
  status: 'completed' | 'failed'
}

/**
 * Runs the plan's transaction until it lands, retrying transient errors (issue 8, path 4). An
 * attempt calls `committing` with its value once its COMMIT may be on the way. Such an
 * attempt's COMMIT may have landed with only its answer lost, or may land late, after the
 * holder stopped waiting for it (issue 22): the row is read back before writing again, and
 * again before calling a failed fence a take-over.
 */
async function landing<Tx, T>(holder: CompletingHolder<Tx>, plan: OwnTransaction<Tx, T>): Promise<T> {
  const attempt: Attempt = { status: 'completed' }
  let committing: { value: T } | undefined
  const { writer, fence } = holder
  const value = await writer.retrying('completing in a transaction', async () => {
    // Every try after the first follows a transient error, which can hide a COMMIT that
    // landed. Only an attempt that reached its COMMIT can have.
    const earlier = committing
    if (earlier !== undefined && settledBy(fence, await writer.readBack(), attempt.status)) return earlier.value
    try {
      return await attemptOnce(holder, plan, attempt, (result) => (committing = { value: result }))
    } catch (error) {
      // That COMMIT may still be on its way and land after the read-back, while this attempt
      // waits for the row it locked: then this fence fails on this holder's own completion.
      if (error instanceof LockLostSignal && earlier !== undefined && settledBy(fence, await writer.readBack(), attempt.status)) {
        return earlier.value
      }
      throw error
    }
  })
  holder.ended(attempt.status)
  return value
}

/** One attempt of an own-transaction plan. */
async function attemptOnce<Tx, T>(holder: CompletingHolder<Tx>, plan: OwnTransaction<Tx, T>, attempt: Attempt, committing: (value: T) => void): Promise<T> {
  const { store, fence } = holder
  if (plan.kind === 'with-statements') {
    attempt.status = plan.outcome.status
    // Sent with its COMMIT: from here on, an error may hide a landed completion.
    committing(undefined as T)
    if (!(await store.complete(fence, { ...plan.outcome, statements: plan.statements }))) throw new LockLostSignal()
    return undefined as T
  }
  return store.transaction(async (tx) => {
    const value = plan.kind === 'after-work' ? await workThenComplete(holder, plan.work, tx, attempt, committing) : await completeThenWrite<Tx, T>(holder, plan, tx, attempt)
    committing(value)
    return value
  })
}

/**
 * `completeInTransaction`: the work, then the completion as the transaction's last statement, which
 * the store may send with the COMMIT (`commit: true`, one round trip for both, issue 21).
 */
async function workThenComplete<Tx, T>(holder: CompletingHolder<Tx>, work: CompletionWork<Tx, T>, tx: Tx, attempt: Attempt, committing: (value: T) => void): Promise<T> {
  const result = await work(tx)
  attempt.status = result.status ?? 'completed'
  // The COMMIT may leave with the completion: from here on, an error may hide a landed completion.
  committing(result.value)
  if (!(await holder.store.complete(holder.fence, { status: attempt.status, response: result.response, tx, commit: true }))) {
    // Invariant 3: the business writes of a holder that lost its claim must not land.
    throw new LockLostSignal()
  }
  return result.value
}

/**
 * The completion with `writes`: the fenced completion is sent first and the writes behind it,
 * so on a pipelining pool BEGIN, the completion and writes that do not await each other leave
 * in one flight and the COMMIT in a second (issue 11). The row lock the completion takes is
 * held only until that COMMIT; a lost fence rolls the writes back.
 */
async function completeThenWrite<Tx, T>(holder: CompletingHolder<Tx>, plan: Extract<CompletionPlan<Tx>, { kind: 'with-writes' }>, tx: Tx, attempt: Attempt): Promise<T> {
  attempt.status = plan.outcome.status
  const fenced = holder.store.complete(holder.fence, { ...plan.outcome, tx })
  // Its failure is thrown below; never unhandled meanwhile.
  fenced.catch(() => undefined)
  try {
    await plan.writes(tx)
  } catch (error) {
    // The completion went first: when it failed (a lock timeout, say), the writes behind it
    // failed only because the transaction was aborted (25P02). Its error is the cause, and
    // decides whether the transaction is retried.
    throw (await fenced.then(() => undefined, (cause: unknown) => cause)) ?? error
  }
  if (!(await fenced)) throw new LockLostSignal()
  return undefined as T
}

/** Whether `row` is the holder's own settled outcome: settled rows keep the writer's token. */
export function settledBy(fence: Fence, row: ClaimSnapshot | null, status: 'completed' | 'failed'): boolean {
  return row !== null && row.status === status && row.fenceToken === fence.fenceToken
}
