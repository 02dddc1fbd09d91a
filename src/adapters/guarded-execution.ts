import type { Execution } from '../engine/execution.js'
import type { StoredResponse } from '../engine/types.js'
import { isOncelyError } from '../errors.js'
import { conflictAnswer, problem, PROBLEM_TYPES, storableHeaders, type HttpAnswer } from './answers.js'
import type { CapturedResponse, CompletionWork, IdempotencyContext } from './http.js'
import type { OutcomeEvent, ResolvedAdapterOptions } from './options.js'

export type Outcome = OutcomeEvent['outcome']

export function report(options: ResolvedAdapterOptions<never, unknown>, outcome: Outcome, status: number, startedAt: number): void {
  try {
    options.onOutcome?.({ outcome, status, durationMs: performance.now() - startedAt })
  } catch (error) {
    // A metrics callback must never turn an answered request into a crash.
    options.log(`oncely: onOutcome threw: ${String(error)}`)
  }
}

/** Retryable statuses: nothing is stored, the key stays retryable (released or suspended). */
export function isRetryableStatus(status: number): boolean {
  return status >= 500 || status === 408 || status === 409 || status === 425 || status === 429
}

/** One claimed request between the engine's `execute` and the handler's answer. */
export class GuardedExecution<Tx> {
  readonly context: IdempotencyContext<Tx>
  readonly #options: ResolvedAdapterOptions<never, Tx>
  readonly #execution: Execution<Tx>
  readonly #startedAt: number
  readonly #writes: Array<CompletionWork<Tx>> = []
  #settled = false

  constructor(options: ResolvedAdapterOptions<never, Tx>, execution: Execution<Tx>, startedAt: number) {
    this.#options = options
    this.#execution = execution
    this.#startedAt = startedAt
    const writes = this.#writes
    this.context = Object.freeze({ execution, writeOnCompletion: (work: CompletionWork<Tx>) => void writes.push(work) })
  }

  get settled(): boolean {
    return this.#settled
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
    report(this.#options, outcome, status, this.#startedAt)
    return replacement
  }

  async #apply(captured: CapturedResponse): Promise<[HttpAnswer | null, number, Outcome]> {
    const execution = this.#execution
    const sent = (status: number): [null, number, Outcome] => [null, status, status < 400 ? 'created' : 'failed']
    if (captured.kind === 'thrown') {
      await this.#letGo()
      return [null, 500, 'failed']
    }
    if (captured.kind === 'streamed') {
      await this.#letGo()
      const detail = 'this route streamed its response, which cannot be stored and replayed; send a complete body on routes that need an Idempotency-Key'
      this.#options.log(`oncely: ONCELY_RESPONSE_NOT_REPLAYABLE: ${detail} (key ${JSON.stringify(execution.key)})`)
      const answer = problem(500, PROBLEM_TYPES.notReplayable, 'Response not replayable', detail)
      return [answer, 500, 'failed']
    }
    if (execution.state !== 'running' && execution.state !== 'lost') return sent(captured.status)
    const { status } = captured
    if (isRetryableStatus(status) || (status >= 400 && !execution.sideEffectsPossible)) {
      await this.#letGo()
      return sent(status)
    }
    if (captured.body.byteLength > this.#options.maxStoredBodyBytes) {
      this.#options.log(
        `oncely: the ${status} response to key ${JSON.stringify(execution.key)} has ${captured.body.byteLength} bytes, more than maxStoredBodyBytes (${this.#options.maxStoredBodyBytes}); it was sent but not stored, so a retry runs again`,
      )
      await this.#letGo()
      return sent(status)
    }
    const response: StoredResponse = { status, headers: storableHeaders(captured.headers), body: captured.body }
    try {
      await this.#store(status < 400 ? 'completed' : 'failed', response)
    } catch (error) {
      if (isOncelyError(error, 'ONCELY_LOCK_LOST')) {
        return [conflictAnswer(1, 'another request took this Idempotency-Key over while it was processed; retry to get its outcome'), 409, 'conflict']
      }
      this.#options.log(`oncely: the outcome of key ${JSON.stringify(execution.key)} could not be stored: ${String(error)}`)
      await this.#letGo()
      const detail = 'the outcome of this request could not be recorded; retry with the same Idempotency-Key'
      return [problem(503, PROBLEM_TYPES.outcomeNotRecorded, 'Outcome not recorded', detail, [['retry-after', '1']]), 503, 'failed']
    }
    return sent(status)
  }

  async #store(status: 'completed' | 'failed', response: StoredResponse): Promise<void> {
    const execution = this.#execution
    if (this.#writes.length === 0) {
      await (status === 'completed' ? execution.complete(response) : execution.fail(response))
      return
    }
    // Invariant 8: the business writes and the completion commit together, or neither does.
    await execution.completeInTransaction(async (tx) => {
      for (const work of this.#writes) await work(tx)
      return { response, status, value: undefined }
    })
  }

  /** Invariant 7: release while nothing can have happened, else suspend so a retry resumes. */
  async #letGo(): Promise<void> {
    const execution = this.#execution
    if (execution.state !== 'running') return
    try {
      await (execution.sideEffectsPossible ? execution.suspend() : execution.release())
    } catch (error) {
      if (!isOncelyError(error, 'ONCELY_LOCK_LOST')) {
        this.#options.log(`oncely: key ${JSON.stringify(execution.key)} could not be released; it is retried once its claim goes stale: ${String(error)}`)
      }
    }
  }
}

