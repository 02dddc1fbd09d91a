import { OncelyError } from '../errors.js'
import type { ResolvedEngineOptions } from './options.js'
import { deriveStepKey, toStoredForm } from './phases.js'
import type { Fence, FinalOutcome } from './store.js'
import type { ClaimKind, ClaimState, StoredResponse } from './types.js'

/** What a step's function receives. */
export interface StepContext {
  /** The key to pass to the outside world for this step, so the provider dedupes it too. */
  idempotencyKey: string
}

/** How a claim ended, or `running` while it is held. */
export type ExecutionState = 'running' | 'completed' | 'failed' | 'released' | 'suspended' | 'lost'

/**
 * The right to run one key's operation, held by exactly one worker at a time. Runs the handler's
 * phases, renews the lease while it is held, and ends in exactly one of: `complete`, `fail`,
 * `release`, `suspend`. Every write it makes is fenced: after a take-over it throws
 * `ONCELY_LOCK_LOST` and changes nothing.
 */
export class Execution<Tx = unknown> {
  readonly scope: string
  readonly key: string
  /** The claim's identity; the same after a take-over. */
  readonly claimId: string
  /** How this worker came to own the key. */
  readonly how: ClaimKind
  #fence: Fence
  #phases: Record<string, unknown>
  #recoveryPoint: string | null
  #state: ExecutionState = 'running'
  #stepEntered = false
  #lease: NodeJS.Timeout
  #options: ResolvedEngineOptions<Tx>

  constructor(claim: ClaimState, how: ClaimKind, options: ResolvedEngineOptions<Tx>) {
    this.scope = claim.scope
    this.key = claim.key
    this.claimId = claim.claimId
    this.how = how
    this.#fence = { scope: claim.scope, key: claim.key, fenceToken: claim.fenceToken }
    this.#phases = { ...claim.phases }
    this.#recoveryPoint = claim.recoveryPoint
    this.#options = options
    this.#lease = setInterval(() => void this.#renewLease(), options.leaseRenewMs)
    // A lease timer must never keep a process alive on its own.
    this.#lease.unref()
  }

  /** The fence token this worker holds (exposed for tests and diagnostics). */
  get fenceToken(): string {
    return this.#fence.fenceToken
  }

  /** The last committed phase, or null before any: a retry resumes after it. */
  get recoveryPoint(): string | null {
    return this.#recoveryPoint
  }

  get state(): ExecutionState {
    return this.#state
  }

  /**
   * True once a side effect may have happened: a step was entered in this run, or an earlier
   * run committed one. Decides the default failure policy (Invariant 7).
   */
  get sideEffectsPossible(): boolean {
    return this.#stepEntered || Object.keys(this.#phases).length > 0
  }

  /** The key step `name` passes on; the same in every run of this claim, take-overs included. */
  stepKey(name: string): string {
    return deriveStepKey({ scope: this.scope, key: this.key, claimId: this.claimId, step: name })
  }

  /**
   * Runs one phase (Invariant 2): outside any transaction, with a derived key to pass on. Its
   * result (plain JSON data) commits with the recovery point; when a retry resumes this claim,
   * a committed step returns its stored result and does not run again.
   *
   * @example
   * ```ts
   * const charge = await execution.step('charge', ({ idempotencyKey }) =>
   *   provider.charge({ amount: 1000 }, idempotencyKey))
   * ```
   */
  async step<T>(name: string, run: (context: StepContext) => Promise<T> | T): Promise<T> {
    this.#assertRunning()
    if (Object.hasOwn(this.#phases, name)) return this.#phases[name] as T
    this.#stepEntered = true
    const result = await run({ idempotencyKey: this.stepKey(name) })
    const stored = toStoredForm(result)
    if (!stored.ok) throw new OncelyError('ONCELY_STEP_RESULT_NOT_JSON', `step ${JSON.stringify(name)} returned a value that is not JSON data`)
    this.#assertRunning()
    if (!(await this.#options.store.commitPhase(this.#fence, name, stored.value))) this.#lost()
    this.#phases[name] = stored.value
    this.#recoveryPoint = name
    return stored.value as T
  }

  /**
   * Stores the response and ends the claim; later requests with the key replay it. With `tx`,
   * the completion runs inside the caller's open transaction, so business rows, outbox rows and
   * the completion commit or roll back together (Invariant 8). If that transaction rolls back,
   * this execution is still ended: the claim stays `in_progress`, its lease is no longer renewed,
   * and a retry takes it over once it is stale and resumes after the last committed phase.
   */
  async complete(response: StoredResponse, options: { tx?: Tx } = {}): Promise<void> {
    await this.#finish({ status: 'completed', response }, options.tx)
  }

  /**
   * Stores a failure response that must be replayed, not retried: for a failure after a side
   * effect may have happened, such as a card declined by the provider (Invariant 7).
   */
  async fail(response: StoredResponse, options: { tx?: Tx } = {}): Promise<void> {
    await this.#finish({ status: 'failed', response }, options.tx)
  }

  /**
   * Runs `work` in a transaction on the store's pool and completes the key in that same
   * transaction; resolves to what `work` returned. If the claim was lost meanwhile, the whole
   * transaction rolls back and this throws `ONCELY_LOCK_LOST`.
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
    work: (tx: Tx) => Promise<{ response: StoredResponse; status?: 'completed' | 'failed'; value: T }>,
  ): Promise<T> {
    this.#assertRunning()
    let status: 'completed' | 'failed' = 'completed'
    const { completed, value } = await this.#options.store.completeInTransaction(this.#fence, async (tx) => {
      const result = await work(tx)
      status = result.status ?? 'completed'
      return { outcome: { status, response: result.response }, value: result.value }
    })
    if (!completed) this.#lost()
    this.#end(status)
    return value
  }

  /**
   * Deletes the claim: the key may be retried as a new request. Only safe while no side effect
   * can have happened (Invariant 7); the default failure policy calls it only then.
   */
  async release(): Promise<void> {
    this.#assertRunning()
    const ok = await this.#options.store.release(this.#fence)
    if (!ok) this.#lost()
    this.#end('released')
  }

  /**
   * Gives the claim up but keeps every committed phase: the next retry takes it over at once
   * and resumes after the recovery point, passing the same step keys, so the provider never
   * runs a step twice.
   */
  async suspend(): Promise<void> {
    this.#assertRunning()
    const ok = await this.#options.store.suspend(this.#fence)
    if (!ok) this.#lost()
    this.#end('suspended')
  }

  async #finish(outcome: FinalOutcome, tx: Tx | undefined): Promise<void> {
    this.#assertRunning()
    if (!(await this.#options.store.complete(this.#fence, outcome, tx))) this.#lost()
    this.#end(outcome.status)
  }

  async #renewLease(): Promise<void> {
    if (this.#state !== 'running') return
    try {
      if (!(await this.#options.store.renewLease(this.#fence, this.#options.ttlMs))) {
        clearInterval(this.#lease)
        if (this.#state === 'running') this.#state = 'lost'
      }
    } catch {
      // A failed renewal is retried at the next tick; if the database stays away, the claim goes
      // stale and a retry takes it over, and this worker's fenced writes then fail.
    }
  }

  #assertRunning(): void {
    if (this.#state === 'lost') this.#lost()
    if (this.#state !== 'running') {
      throw new OncelyError('ONCELY_CLAIM_FINISHED', `the execution of key ${JSON.stringify(this.key)} already ended (${this.#state})`)
    }
  }

  #lost(): never {
    this.#end('lost')
    throw new OncelyError('ONCELY_LOCK_LOST', `the claim on key ${JSON.stringify(this.key)} was taken over; this worker may no longer write`)
  }

  #end(state: ExecutionState): void {
    this.#state = state
    clearInterval(this.#lease)
  }
}
