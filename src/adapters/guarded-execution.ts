import type { Execution } from '../engine/execution.js'
import type { StoredResponse, WriteStatement } from '../engine/types.js'
import { isOncelyError, OncelyError } from '../errors.js'
import { isRetryableStatus } from '../retryable-status.js'
import type { LogFields } from '../logger.js'
import { conflictAnswer, problem, PROBLEM_TYPES, storeUnavailableAnswer, type HttpAnswer, type KeyAdvice } from './answers.js'
import { withKeyTtl } from './key-ttl.js'
import { resultUnavailableResponse } from './result-unavailable.js'
import { codeOf, describeForLog, withHashedKey, withoutKey } from './log-fields.js'
import type { OutcomeEvent, ResolvedAdapterOptions } from './options.js'
import type { CapturedResponse, CompletionWork, IdempotencyContext } from './request-context.js'
import { storableHeaders } from './stored-headers.js'

export type Outcome = OutcomeEvent['outcome']

/** Who sent a request the engine decided on, for the outcome event (`OutcomeEvent.fingerprint`). */
export interface DecidedRequest {
  readonly scope: string
  readonly key: string
  readonly fingerprint: string
}

export function report(options: ResolvedAdapterOptions<never, unknown>, outcome: Outcome, status: number, startedAt: number, instance?: string, fields: LogFields = {}, decided?: DecidedRequest): void {
  if (options.onOutcome === undefined) return
  try {
    options.onOutcome({
      outcome,
      status,
      durationMs: performance.now() - startedAt,
      ...(instance === undefined ? {} : { instance }),
      ...(decided === undefined ? {} : { scope: decided.scope, key: decided.key, fingerprint: decided.fingerprint }),
    })
  } catch (error) {
    // A metrics callback must never turn an answered request into a crash.
    options.log.error(fields, `oncely: onOutcome threw: ${String(error)}`)
  }
}

/** One claimed request between the engine's `execute` and the handler's answer. */
export class GuardedExecution<Tx> {
  readonly context: IdempotencyContext<Tx>
  readonly #options: ResolvedAdapterOptions<never, Tx>
  readonly #execution: Execution<Tx>
  readonly #startedAt: number
  readonly #writes: Array<CompletionWork<Tx> | WriteStatement> = []
  /** The fields of this request's log lines: route, scope, hashed key. */
  readonly logFields: Readonly<LogFields>
  #settled = false

  readonly #decided: DecidedRequest | undefined

  constructor(options: ResolvedAdapterOptions<never, Tx>, execution: Execution<Tx>, startedAt: number, logFields: LogFields = {}, fingerprint?: string) {
    this.#options = options
    this.#execution = execution
    this.#startedAt = startedAt
    this.#decided = fingerprint === undefined ? undefined : { scope: execution.scope, key: execution.key, fingerprint }
    // The request's fields with the execution's scope and key, the key hashed only if a line is written.
    this.logFields = Object.freeze(withHashedKey({ ...withoutKey(logFields), scope: execution.scope }, execution.key))
    const writes = this.#writes
    this.context = Object.freeze({ execution, writeOnCompletion: (work: CompletionWork<Tx> | WriteStatement) => void writes.push(work) })
  }

  get settled(): boolean {
    return this.#settled
  }

  /** How much of a streamed body the adapter copies for the record (the `maxStoredBodyBytes` option). */
  get maxStoredBodyBytes(): number {
    return this.#options.maxStoredBodyBytes
  }

  /**
   * Applies the completion rule (docs/adapters.md) to what the handler answered. Resolves to a
   * replacement answer to send instead, or `null` to send the captured response as it is. Never
   * rejects; it is called once, later calls resolve to `null`.
   */
  async settle(captured: CapturedResponse): Promise<HttpAnswer | null> {
    if (this.#settled) return null
    this.#settled = true
    const [replacement, status, outcome] = await this.#apply(captured)
    report(this.#options, outcome, status, this.#startedAt, replacement?.instance, this.logFields, this.#decided)
    return replacement && withKeyTtl(replacement, this.#options.keyTtlSeconds)
  }

  async #apply(captured: CapturedResponse): Promise<[HttpAnswer | null, number, Outcome]> {
    const execution = this.#execution
    const sent = (status: number): [null, number, Outcome] => [null, status, status < 400 ? 'created' : 'failed']
    if (captured.kind === 'thrown') {
      await this.#letGo()
      return [null, 500, 'failed']
    }
    if (execution.state !== 'running' && execution.state !== 'lost') return sent(captured.status)
    const { status } = captured
    if (isRetryableStatus(status) || (status >= 400 && !execution.sideEffectsPossible)) {
      await this.#letGo()
      return sent(status)
    }
    // A streamed response that could not be kept whole has no body to redact or measure.
    const redacted = captured.kind === 'unstorable' ? ({ ok: false, reason: captured.reason } as const) : await this.#redacted({ status, headers: storableHeaders(captured.headers), body: captured.body })
    let response: StoredResponse
    if (!redacted.ok || redacted.response.body.byteLength > this.#options.maxStoredBodyBytes) {
      // Issue 8 path 5 and issue 23: an outcome that is not recorded would be run again by every
      // retry, so the outcome is recorded with a marker in place of the body: the first caller
      // gets the response, a retry the result-unavailable problem, and nothing runs twice.
      const reason = redacted.ok
        ? `the ${status} response had ${redacted.response.body.byteLength} bytes, more than maxStoredBodyBytes (${this.#options.maxStoredBodyBytes}), so it was not stored`
        : captured.kind === 'unstorable'
          ? redacted.reason
          : `the redact hook failed on the ${status} response (${redacted.reason}), so it was not stored`
      const marker = resultUnavailableResponse(status, reason, this.#options.keyTtlSeconds)
      this.#options.log.warn({ ...this.logFields, code: 'ONCELY_RESPONSE_NOT_REPLAYABLE', instance: marker.instance }, `oncely: ${reason}; a retry is answered 500 result-unavailable`)
      response = marker.response
    } else {
      response = redacted.response
    }
    try {
      await this.#store(status < 400 ? 'completed' : 'failed', response)
    } catch (error) {
      return this.#storeFailed(error)
    }
    return sent(status)
  }

  /** The answer to a completion that did not land, by what the engine says happened. */
  async #storeFailed(error: unknown): Promise<[HttpAnswer, number, Outcome]> {
    if (isOncelyError(error, 'ONCELY_LOCK_LOST')) {
      return [conflictAnswer(1, 'another request took this Idempotency-Key over while it was processed; retry to get its outcome', this.#options.keyTtlSeconds), 409, 'conflict']
    }
    if (isOncelyError(error, 'ONCELY_OUTCOME_NOT_RECORDED')) {
      // The engine kept the claim suspended with the error recorded: retrying cannot help until
      // the cause is fixed, and then the retry resumes after the last committed step.
      const detail = 'the outcome of this request could not be recorded, for a reason a retry will not fix; the operation is kept for an operator, quote the instance to support'
      const advice = { newKeySafe: false, state: 'suspended' } as const
      const answer = problem({ status: 500, type: PROBLEM_TYPES.outcomeNotRecorded, title: 'Outcome not recorded', detail, retryable: false, advice, keyTtlSeconds: this.#options.keyTtlSeconds })
      this.#options.log.error({ ...this.logFields, code: 'ONCELY_OUTCOME_NOT_RECORDED', instance: answer.instance }, `oncely: the outcome could not be recorded: ${this.#describe(error)}`)
      return [answer, 500, 'failed']
    }
    await this.#letGo()
    const advice = this.#afterLetGo()
    const ttl = this.#options.keyTtlSeconds
    const answer = isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')
      ? storeUnavailableAnswer('the outcome of this request could not be recorded while the database is away; retry with the same Idempotency-Key', ttl, advice.state)
      : problem({
          status: 503,
          type: PROBLEM_TYPES.outcomeNotRecorded,
          title: 'Outcome not recorded',
          detail: 'the outcome of this request could not be recorded; retry with the same Idempotency-Key',
          retryable: true,
          advice,
          keyTtlSeconds: ttl,
          headers: [['retry-after', '1']],
        })
    this.#options.log.error({ ...this.logFields, ...codeOf(error), instance: answer.instance }, `oncely: the outcome could not be stored: ${this.#describe(error)}`)
    return [answer, 503, 'failed']
  }

  /** The `redact` hook's response, checked: a response of the same status, or why not (issue 23). */
  async #redacted(response: StoredResponse): Promise<{ ok: true; response: StoredResponse } | { ok: false; reason: string }> {
    const { redact } = this.#options
    if (redact === undefined) return { ok: true, response }
    try {
      const result: unknown = await redact(response)
      const shaped = result as Partial<StoredResponse> | null
      if (typeof shaped !== 'object' || shaped === null || !Array.isArray(shaped.headers) || !(shaped.body instanceof Uint8Array)) return { ok: false, reason: 'it returned no { status, headers, body } response' }
      if (shaped.status !== response.status) return { ok: false, reason: `it changed the status to ${String(shaped.status)}` }
      return { ok: true, response: { status: response.status, headers: storableHeaders(shaped.headers), body: shaped.body } }
    } catch (error) {
      return { ok: false, reason: `it threw: ${this.#describe(error)}` }
    }
  }

  async #store(status: 'completed' | 'failed', response: StoredResponse): Promise<void> {
    const execution = this.#execution
    if (this.#writes.length === 0) {
      await (status === 'completed' ? execution.complete(response) : execution.fail(response))
      return
    }
    // Invariant 8: the business writes and the completion commit together, or neither does.
    const registered = this.#writes
    const statements = registered.filter((work): work is WriteStatement => typeof work !== 'function')
    if (statements.length === registered.length) {
      await (status === 'completed' ? execution.complete(response, { statements }) : execution.fail(response, { statements }))
      return
    }
    // A statement among functions runs in its turn on the transaction, which only the store
    // knows how to do: the adapter never looks inside `tx`.
    const { store } = this.#options.engine.options
    const writes = async (tx: Tx) => {
      for (const work of registered) {
        if (typeof work === 'function') await work(tx)
        else if (store.runStatement !== undefined) await store.runStatement(tx, work)
        else throw new OncelyError('ONCELY_INVALID_OPTION', 'writeOnCompletion was given a statement, which this store cannot run; give the write as a function of the transaction')
      }
    }
    await (status === 'completed' ? execution.complete(response, { writes }) : execution.fail(response, { writes }))
  }

  #describe(error: unknown): string {
    return describeForLog(error, this.#execution.key)
  }

  /**
   * What a client may do once the claim was let go: a new key is safe only when the claim was
   * released, which happens only while no step can have had a side effect (Invariant 7). A claim
   * that could not be let go stays held until it goes stale, or another request holds it.
   */
  #afterLetGo(): Omit<KeyAdvice, 'retrySameKey'> {
    const { state } = this.#execution
    if (state === 'released') return { newKeySafe: true, state: 'none' }
    return { newKeySafe: false, state: state === 'suspended' ? 'suspended' : 'running' }
  }

  /** Invariant 7: release while nothing can have happened, else suspend so a retry resumes. */
  async #letGo(): Promise<void> {
    const execution = this.#execution
    if (execution.state !== 'running') return
    try {
      await (execution.sideEffectsPossible ? execution.suspend() : execution.release())
    } catch (error) {
      if (!isOncelyError(error, 'ONCELY_LOCK_LOST')) {
        this.#options.log.warn({ ...this.logFields, ...codeOf(error) }, `oncely: the key could not be released; it is retried once its claim goes stale: ${this.#describe(error)}`)
      }
    }
  }
}
