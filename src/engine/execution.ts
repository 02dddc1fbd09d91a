import { OncelyError, type OncelyErrorCode } from '../errors.js'
import { invalid, invalidHidden } from '../option-validation.js'
import { complete, planCompletion, type CompletingHolder, type CompletionOptions, type CompletionPlan, type CompletionWork } from './completion.js'
export type { CompletionOptions } from './completion.js'
import { publishEnded } from './events.js'
import type { ResolvedEngineOptions } from './options.js'
import { decodeStepResult, deriveStepKey, encodeStepResult, toStoredForm } from './steps.js'
import { FencedWriter, isUnavailable } from './fenced-write.js'
import { Lease } from './lease.js'
import { describeError } from './retry.js'
import type { CarriedSteps, Fence } from './store.js'
import type { ClaimKind, ClaimState, ExecutionState, StoredResponse } from './types.js'

/** What a step's function receives. */
export interface StepContext {
  /**
   * The key to send to the provider (the outside world) with this step's call, so the provider
   * dedupes it too. Derived from the request's key, the claim and the step's name
   * (`deriveStepKey`): the same in every run of this claim, take-overs included, and never the
   * request's own `Idempotency-Key`.
   */
  providerKey: string
  /**
   * The same value as `providerKey`, under the name it had first.
   *
   * @deprecated Use `providerKey`: this is the key sent to the provider, not the request's
   * idempotency key. Kept for one release, removed in the one after.
   */
  idempotencyKey: string
}

/** How a step may be repeated after a crash. */
export interface StepOptions {
  /**
   * `'at-least-once'`: the step's result commits after its function returns; a take-over after a
   * crash runs the function again with the same idempotency key, so the provider dedupes it.
   * `'at-most-once'`: the step is recorded as started *before* its function runs; a take-over
   * skips it (the step resolves to `undefined`), so a send where a duplicate is worse than a loss
   * is never repeated (Invariant 13). (Default: `'at-least-once'`)
   */
  delivery?: 'at-least-once' | 'at-most-once'
  /**
   * When the result commits. `'now'`: one fenced write of its own, before `step` returns.
   * `'with-next-write'`: it rides with this claim's next write — the next step's commit or
   * at-most-once mark — and saves that round trip and commit (issue 11); the completion ends the
   * claim and needs it no more. Until then it is as if the process died before committing: a
   * take-over runs the step again with the same key, so choose it only for a step whose provider
   * dedupes by that key (an at-least-once step's premise), never to skip a step. (Default: `'now'`)
   */
  commit?: 'now' | 'with-next-write'
}

/** How `afterCompletion` reports a send that failed. */
export interface AfterCompletionOptions {
  /**
   * Called with what `run` threw or rejected with. The outcome is already recorded, so the error
   * changes nothing of the answer; without this, the error is reported by
   * `process.emitWarning` (stderr, once per error). (Default: none)
   */
  onError?: (error: unknown) => void
}

function checkStepOptions(options: StepOptions): void {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  if (options.delivery !== undefined && options.delivery !== 'at-least-once' && options.delivery !== 'at-most-once') {
    throw invalid('delivery', "must be 'at-least-once' or 'at-most-once'", options.delivery)
  }
  if (options.commit !== undefined && options.commit !== 'now' && options.commit !== 'with-next-write') {
    throw invalid('commit', "must be 'now' or 'with-next-write'", options.commit)
  }
}

/**
 * The right to run one key's operation, held by exactly one worker at a time. Runs the handler's
 * steps, renews the lease while it is held, and ends in exactly one of: `complete`, `fail`,
 * `release`, `suspend`. Every write it makes is fenced: after a take-over it throws
 * `ONCELY_LOCK_LOST` and changes nothing. Every write is retried while the database is away, for
 * as long as the lease allows; past that the worker stops renewing (so a retry can take the
 * claim over) and throws `ONCELY_STORE_UNAVAILABLE`.
 */
export class Execution<Tx = unknown> {
  readonly scope: string
  readonly key: string
  /** The claim's identity; the same after a take-over. */
  readonly claimId: string
  /** How this worker came to own the key. */
  readonly how: ClaimKind
  #fence: Fence
  #stepResults: Record<string, unknown>
  #startedSteps: Set<string>
  /** Step results run with `commit: 'with-next-write'` and not yet committed (insertion order = run order). */
  readonly #deferred = new Map<string, unknown>()
  /** Sends to make once the outcome is recorded (`afterCompletion`), in the order registered. */
  readonly #afterCompletion: Array<{ name: string; run: () => unknown; onError: ((error: unknown) => void) | undefined }> = []
  #recoveryPoint: string | null
  #interrupted: boolean
  #state: ExecutionState = 'running'
  #lostCode: OncelyErrorCode = 'ONCELY_LOCK_LOST'
  #stepEntered = false
  #finishing = false
  readonly #lease: Lease
  readonly #writer: FencedWriter
  readonly #completing: CompletingHolder<Tx>
  #options: ResolvedEngineOptions<Tx>

  constructor(claim: ClaimState, how: ClaimKind, options: ResolvedEngineOptions<Tx>) {
    this.scope = claim.scope
    this.key = claim.key
    this.claimId = claim.claimId
    this.how = how
    this.#fence = { scope: claim.scope, key: claim.key, fenceToken: claim.fenceToken }
    this.#stepResults = Object.fromEntries(Object.entries(claim.stepResults).map(([name, stored]) => [name, decodeStepResult(stored)]))
    this.#startedSteps = new Set(claim.startedSteps)
    this.#recoveryPoint = claim.recoveryPoint
    // Invariant 11: a claim that was taken over or suspended may have been acted on.
    this.#interrupted = claim.interrupted || how === 'take-over'
    this.#options = options
    this.#lease = new Lease({
      renew: () => options.store.renewLease(this.#fence, options.ttlMs),
      renewEveryMs: options.leaseRenewMs,
      staleAfterMs: options.staleAfterMs,
      deadlineMs: options.handlerDeadlineMs,
      onRefused: () => {
        if (this.#state === 'running' && !this.#finishing) this.#end('lost')
      },
      onDeadline: () => this.#abandon('ONCELY_HANDLER_DEADLINE_EXCEEDED'),
    })
    this.#writer = new FencedWriter({
      store: options.store,
      scope: claim.scope,
      key: claim.key,
      lease: this.#lease,
      onUnavailable: () => this.#abandon('ONCELY_STORE_UNAVAILABLE'),
    })
    this.#completing = {
      store: options.store,
      fence: this.#fence,
      writer: this.#writer,
      ended: (status) => this.#end(status),
      lost: () => this.#lost(),
      notRecorded: (error) => this.#notRecorded(error),
    }
  }

  /** The fence token this worker holds (exposed for tests and diagnostics). */
  get fenceToken(): string {
    return this.#fence.fenceToken
  }

  /** The last committed step, or null before any: a retry resumes after it. */
  get recoveryPoint(): string | null {
    return this.#recoveryPoint
  }

  get state(): ExecutionState {
    return this.#state
  }

  /**
   * True once a side effect may have happened: a step was entered in this run, an earlier run
   * committed or started one, or the claim was ever taken over or suspended (an earlier owner may
   * have entered a step it never recorded). Decides the default failure policy (Invariant 7),
   * and a claim for which it is true is never deleted (Invariant 11).
   */
  get sideEffectsPossible(): boolean {
    return this.#stepEntered || this.#interrupted || this.#startedSteps.size > 0 || Object.keys(this.#stepResults).length > 0
  }

  /** The key step `name` passes on; the same in every run of this claim, take-overs included. */
  stepKey(name: string): string {
    return deriveStepKey({ scope: this.scope, key: this.key, claimId: this.claimId, step: name })
  }

  /**
   * Runs one step (Invariant 2): outside any transaction, with a derived key to pass on. Its
   * result (plain JSON data) commits with the recovery point; when a retry resumes this claim,
   * a committed step returns its stored result and does not run again. With
   * `{ delivery: 'at-most-once' }` the step is recorded before it runs and a resumed run skips
   * it, resolving to `undefined` (see `StepOptions`).
   *
   * @example
   * ```ts
   * const charge = await execution.step('charge', ({ providerKey }) =>
   *   provider.charge({ amount: 1000 }, providerKey))
   * ```
   */
  step<T>(name: string, run: (context: StepContext) => Promise<T> | T, options?: StepOptions & { delivery?: 'at-least-once' }): Promise<T>
  step<T>(name: string, run: (context: StepContext) => Promise<T> | T, options: StepOptions & { delivery: 'at-most-once' }): Promise<T | undefined>
  step<T>(name: string, run: (context: StepContext) => Promise<T> | T, options?: StepOptions): Promise<T | undefined>
  async step<T>(name: string, run: (context: StepContext) => Promise<T> | T, options: StepOptions = {}): Promise<T | undefined> {
    this.#assertRunning()
    if (Object.hasOwn(this.#stepResults, name)) return this.#stepResults[name] as T
    checkStepOptions(options)
    if (options.delivery === 'at-most-once') {
      // Invariant 13: recorded before it is made; a take-over finds it started and skips it.
      if (this.#startedSteps.has(name)) return undefined
      const carried = this.#carried()
      const marked = await this.#writer.write(`recording step ${JSON.stringify(name)} as started`, () =>
        this.#options.store.markStepStarted(this.#fence, name, carried),
      )
      if (!marked) this.#lost()
      this.#startedSteps.add(name)
      this.#settleCarried(carried)
    }
    this.#stepEntered = true
    const providerKey = this.stepKey(name)
    // eslint-disable-next-line @typescript-eslint/no-deprecated -- the old name, kept for one release
    const result = await run({ providerKey, idempotencyKey: providerKey })
    const stored = toStoredForm(result)
    if (!stored.ok) throw new OncelyError('ONCELY_STEP_RESULT_NOT_JSON', `step ${JSON.stringify(name)} returned a value that is not JSON data`)
    this.#assertRunning()
    const encoded = encodeStepResult(stored.value, stored.json)
    if (options.commit === 'with-next-write') {
      this.#deferred.set(name, encoded)
      this.#stepResults[name] = stored.value
      return stored.value as T
    }
    const carried = this.#carried()
    const committed = await this.#writer.write(`committing step ${JSON.stringify(name)}`, () =>
      this.#options.store.commitStep(this.#fence, name, encoded, carried),
    )
    if (!committed) this.#lost()
    this.#settleCarried(carried)
    this.#stepResults[name] = stored.value
    this.#recoveryPoint = name
    return stored.value as T
  }

  /**
   * An at-most-once send made after the outcome is recorded, with no write of its own (Invariant
   * 13): the completion's commit is the record. `run` is called once `complete`, `fail` or
   * `completeInTransaction` has committed, before that call resolves (so an adapter answers after
   * it); never when the outcome was not recorded (the claim released, suspended, lost, or its
   * transaction rolled back), since a retry then runs the handler again and registers it again.
   * A crash between the commit and `run` loses the send: it is never made twice. Where a step
   * with `{ delivery: 'at-most-once' }` costs a fenced write (a round trip and a commit) before
   * it runs, this costs none; choose it for a send whose result the response does not need (a
   * receipt, a notification). Not with `complete(response, { tx })`: oncely cannot tell when your
   * transaction commits, so make the send yourself after your COMMIT.
   *
   * @example
   * ```ts
   * execution.afterCompletion('receipt', () => mailer.send({ to: customer, charge }), {
   *   onError: (error) => log.warn(`receipt not sent: ${String(error)}`),
   * })
   * ```
   */
  afterCompletion(name: string, run: () => unknown, options: AfterCompletionOptions = {}): void {
    this.#assertRunning()
    if (typeof name !== 'string' || name.length === 0) throw invalid('name', 'must be a non-empty string', name)
    if (typeof run !== 'function') throw invalid('run', 'must be a function', run)
    if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
    if (options.onError !== undefined && typeof options.onError !== 'function') throw invalid('onError', 'must be a function', options.onError)
    this.#afterCompletion.push({ name, run, onError: options.onError })
  }

  /** Makes the sends `afterCompletion` registered, once each, now that the outcome is recorded. */
  async #runAfterCompletion(): Promise<void> {
    const sends = this.#afterCompletion.splice(0)
    for (const { name, run, onError } of sends) {
      try {
        await run()
      } catch (error) {
        if (onError === undefined) {
          process.emitWarning(`oncely: the send ${JSON.stringify(name)} after the completion of key ${JSON.stringify(this.key)} failed: ${describeError(error)}`, { code: 'ONCELY_AFTER_COMPLETION_FAILED' })
          continue
        }
        try {
          onError(error)
        } catch {
          // A reporting callback must never turn a recorded outcome into an error.
        }
      }
    }
  }

  /** The deferred step results the next fenced write carries, or undefined when there are none. */
  #carried(): CarriedSteps | undefined {
    if (this.#deferred.size === 0) return undefined
    return { stepResults: Object.fromEntries(this.#deferred), recoveryPoint: [...this.#deferred.keys()].at(-1)! }
  }

  #settleCarried(carried: CarriedSteps | undefined): void {
    if (carried === undefined) return
    for (const name of Object.keys(carried.stepResults)) this.#deferred.delete(name)
    this.#recoveryPoint = carried.recoveryPoint
  }

  /**
   * Stores the response and ends the claim; later requests with the key replay it. With `tx`,
   * the completion runs inside the caller's open transaction, so business rows, outbox rows and
   * the completion commit or roll back together (Invariant 8). If that transaction rolls back,
   * this execution is still ended: the claim stays `in_progress`, its lease is no longer renewed,
   * and a retry takes it over once it is stale and resumes after the last committed step.
   */
  async complete(response: StoredResponse, options: CompletionOptions<Tx> = {}): Promise<void> {
    await this.#finish(planCompletion({ status: 'completed', response }, options))
  }

  /**
   * Stores a failure response that must be replayed, not retried: for a failure after a side
   * effect may have happened, such as a card declined by the provider (Invariant 7).
   */
  async fail(response: StoredResponse, options: CompletionOptions<Tx> = {}): Promise<void> {
    await this.#finish(planCompletion({ status: 'failed', response }, options))
  }

  /**
   * Runs `work` in a transaction on the store's pool and completes the key in that same
   * transaction; resolves to what `work` returned. If the claim was lost meanwhile, the whole
   * transaction rolls back and this throws `ONCELY_LOCK_LOST`. A transient database error runs
   * `work` again in a new transaction (so `work` must only write through `tx`); a deterministic
   * one (a constraint every run violates) keeps the claim suspended with the error recorded and
   * throws `ONCELY_OUTCOME_NOT_RECORDED`; an error that may hide a landed completion (its answer
   * lost) reads the key back first, and returns `work`'s value without running it again when the
   * completion is there. On a `pg` pool the completion leaves with the COMMIT, and on a plain one
   * BEGIN with `work`'s first statement: with one write, two round trips.
   *
   * @example
   * ```ts
   * const charge = await execution.completeInTransaction(async (tx) => {
   *   await tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] })
   *   return { response: { status: 201, headers: [['content-type', 'application/json']], body }, value: id }
   * })
   * ```
   */
  async completeInTransaction<T>(
    work: CompletionWork<Tx, T>,
  ): Promise<T> {
    return this.#finish({ kind: 'after-work', work })
  }

  /**
   * Deletes the claim: the key may be retried as a new request. Only while no side effect can
   * have happened (Invariant 7); once one may have (`sideEffectsPossible`: a step entered, or the
   * claim ever taken over or suspended), it suspends instead, since a claim someone may have
   * acted on is never deleted (Invariant 11): the state is then `suspended`.
   */
  async release(): Promise<void> {
    if (this.sideEffectsPossible) return this.suspend()
    this.#assertRunning()
    this.#finishing = true
    try {
      if (!(await this.#deleteClaim())) this.#lost()
      this.#end('released')
    } finally {
      this.#finishing = false
    }
  }

  /**
   * Gives the claim up but keeps every committed step: the next retry takes it over at once
   * and resumes after the recovery point, passing the same step keys, so the provider never
   * runs a step twice.
   */
  async suspend(): Promise<void> {
    this.#assertRunning()
    this.#finishing = true
    try {
      await this.#suspend(undefined)
    } finally {
      this.#finishing = false
    }
  }

  async #suspend(outcomeError: string | undefined): Promise<void> {
    const ok = await this.#writer.write(
      'suspending the claim',
      () => this.#options.store.suspend(this.#fence, outcomeError),
      // A suspended claim keeps its id and loses the token; the refused retry already said the
      // token is not this worker's. A row of another claim, or none, means the key was freed.
      (row) => row !== null && row.claimId === this.claimId,
    )
    if (!ok) this.#lost()
    this.#end('suspended')
  }

  /** Carries one completion plan out (`completion.ts`): the claim ends with it, or is lost. */
  async #finish<T>(plan: CompletionPlan<Tx, T>): Promise<T> {
    this.#assertRunning()
    if (plan.kind === 'in-caller-transaction' && this.#afterCompletion.length > 0) {
      const names = this.#afterCompletion.map(({ name }) => JSON.stringify(name)).join(', ')
      throw invalidHidden('tx', `cannot be given once afterCompletion registered a send (${names}): oncely cannot tell when your transaction commits, so make the send yourself after your COMMIT`, 'a transaction')
    }
    this.#finishing = true
    let value: T
    try {
      value = await complete(this.#completing, plan)
    } finally {
      this.#finishing = false
    }
    // Most completions register none: no extra await on the hot path then.
    if (this.#afterCompletion.length > 0) await this.#runAfterCompletion()
    return value
  }

  /**
   * Issue 8, path 15: the outcome could not be stored for a reason a retry will not fix. After a
   * possible side effect the claim is suspended with the error recorded (a retry after the fix
   * resumes it; meanwhile it is listed as stuck); before any, it is released. Transient failures
   * and lost claims pass through as they are.
   */
  async #notRecorded(error: unknown): Promise<unknown> {
    if (error instanceof OncelyError || this.#options.store.isTransientError(error) || this.#state !== 'running') {
      if (isUnavailable(error)) this.#abandon('ONCELY_STORE_UNAVAILABLE')
      return error
    }
    const reason = describeError(error).replaceAll('\u0000', '')
    if (this.sideEffectsPossible) await this.#suspend(reason)
    else if (await this.#deleteClaim()) this.#end('released')
    return new OncelyError('ONCELY_OUTCOME_NOT_RECORDED', `the outcome of key ${JSON.stringify(this.key)} could not be stored: ${reason}`, { cause: error })
  }

  /** The fenced delete of an untouched claim; true once it is gone, this worker's answer lost or not. */
  #deleteClaim(): Promise<boolean> {
    return this.#writer.write(
      'releasing the claim',
      () => this.#options.store.release(this.#fence),
      // The same claim still there means a take-over; another claim means the key was freed.
      (row) => row === null || row.claimId !== this.claimId,
    )
  }

  #assertRunning(): void {
    if (this.#state === 'lost') this.#lost()
    if (this.#state !== 'running') {
      throw new OncelyError('ONCELY_CLAIM_FINISHED', `the execution of key ${JSON.stringify(this.key)} already ended (${this.#state})`)
    }
  }

  #lost(): never {
    this.#end('lost')
    throw new OncelyError(this.#lostCode, LOST_MESSAGES[this.#lostCode as keyof typeof LOST_MESSAGES](this.key))
  }

  /** Gives the claim up without a write: no more renewals, no more writes from this worker. */
  #abandon(code: OncelyErrorCode): void {
    if (this.#state !== 'running') return
    this.#lostCode = code
    this.#end('lost')
  }

  #end(state: ExecutionState): void {
    if (this.#state === 'running') publishEnded(this, state, this.#lostCode)
    this.#state = state
    this.#lease.stop()
  }
}

const LOST_MESSAGES = {
  ONCELY_LOCK_LOST: (key: string) => `the claim on key ${JSON.stringify(key)} was taken over; this worker may no longer write`,
  ONCELY_STORE_UNAVAILABLE: (key: string) =>
    `the database stayed unavailable past the lease of key ${JSON.stringify(key)}; this worker gave the claim up and a retry takes it over`,
  ONCELY_HANDLER_DEADLINE_EXCEEDED: (key: string) =>
    `the handler of key ${JSON.stringify(key)} ran past handlerDeadlineMs; its outcome is abandoned and a retry takes the claim over`,
} as const
