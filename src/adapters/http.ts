import type { Execution } from '../engine/execution.js'
import { fingerprintRequest, pickQuery } from '../engine/fingerprint.js'
import type { StoredResponse } from '../engine/types.js'
import { isOncelyError } from '../errors.js'
import { conflictAnswer, problem, PROBLEM_TYPES, replayAnswer, storableHeaders, type HeaderValue, type HttpAnswer } from './answers.js'
import type { ResolvedAdapterOptions } from './options.js'

export * from './answers.js'
export * from './options.js'

/**
 * Work to run inside the transaction that completes the key. Declared as a method so a handler
 * may name its store's transaction type (`async (tx: Queryable) => …`) where the framework's
 * request type cannot carry it.
 */
export type CompletionWork<Tx> = { bivariant(tx: Tx): Promise<void> }['bivariant']

/** What a guarded handler sees: its execution, and a way to write business rows with the completion. */
export interface IdempotencyContext<Tx = unknown> {
  /** Runs steps (`execution.step(name, fn)`) with keys the provider dedupes. */
  readonly execution: Execution<Tx>
  /**
   * Registers business writes that commit in the transaction that stores the response, or not
   * at all (Invariant 8). They run only when the response is stored (`status < 400`, or a 4xx
   * after a step), in registration order.
   */
  writeOnCompletion(work: CompletionWork<Tx>): void
}

/** The parts of a request that enter its fingerprint, plus its key header. */
export interface RequestParts {
  method: string
  /** The matched route pattern (`/v1/charges/:id`), or the path when there is none. */
  route: string
  params?: Readonly<Record<string, string>>
  query?: Readonly<Record<string, unknown>>
  /** The parsed JSON body, or raw bytes. */
  body?: unknown
  key: string | readonly string[] | undefined | null
}

/** The response a handler produced, as an adapter captured it. */
export type CapturedResponse =
  | { kind: 'response'; status: number; headers: Iterable<readonly [string, HeaderValue]>; body: Uint8Array }
  /** The handler streamed its body: it cannot be stored (see docs/adapters.md). */
  | { kind: 'streamed'; status: number }
  /** The handler threw; the framework's error handling answers. */
  | { kind: 'thrown'; error: unknown }

export type Gate<Tx> = { kind: 'answer'; answer: HttpAnswer } | { kind: 'execute'; guard: GuardedExecution<Tx> }

/** Whether a request needs a key, by the `methods` and `routes` options. */
export function isGuarded(options: ResolvedAdapterOptions<never, unknown>, method: string, path: string): boolean {
  return options.methods.has(method.toUpperCase()) && (options.routes?.(method, path) ?? true)
}

/**
 * Asks the engine about a guarded request. Every answer but `execute` is final and reported to
 * `onOutcome` here; an `execute` must be ended with `guard.settle(captured)`.
 */
export async function beginGuarded<Req, Tx>(options: ResolvedAdapterOptions<Req, Tx>, request: Req, parts: RequestParts): Promise<Gate<Tx>> {
  const startedAt = performance.now()
  const answer = (outcome: Outcome, response: HttpAnswer): Gate<Tx> => {
    report(options, outcome, response.status, startedAt)
    return { kind: 'answer', answer: response }
  }
  const scope = await options.scope(request)
  if (scope === undefined || scope === '') {
    return answer('invalid', problem(401, PROBLEM_TYPES.unauthenticated, 'Unauthenticated', 'this request must be authenticated to use an Idempotency-Key'))
  }
  const fingerprint = fingerprintRequest({
    method: parts.method,
    route: parts.route,
    params: parts.params ?? {},
    query: pickQuery(normalizeQuery(parts.query ?? {}), options.query),
    body: parts.body,
  })
  let decision
  try {
    decision = await options.engine.begin({ scope, key: parts.key, fingerprint })
  } catch (error) {
    options.log(`oncely: the idempotency store failed to answer: ${String(error)}`)
    return answer('failed', problem(503, PROBLEM_TYPES.storeUnavailable, 'Idempotency store unavailable', 'the idempotency record could not be read; retry with the same key', [['retry-after', '1']]))
  }
  switch (decision.kind) {
    case 'execute':
      return { kind: 'execute', guard: new GuardedExecution(options, decision.execution, startedAt) }
    case 'replay':
      return answer('replayed', replayAnswer(decision.response))
    case 'conflict':
      return answer('conflict', conflictAnswer(decision.retryAfterSeconds, 'a request with this Idempotency-Key is still being processed; retry later'))
    case 'mismatch':
      return answer('mismatch', problem(422, PROBLEM_TYPES.keyReused, 'Idempotency-Key reused', 'this Idempotency-Key was already used with a different request'))
    case 'invalid':
      return parts.key === undefined || parts.key === null
        ? answer('invalid', problem(400, PROBLEM_TYPES.keyMissing, 'Idempotency-Key missing', `${parts.method.toUpperCase()} ${parts.route} requires an Idempotency-Key header`))
        : answer('invalid', problem(400, PROBLEM_TYPES.keyInvalid, 'Idempotency-Key invalid', decision.reason))
  }
}

type Outcome = Parameters<NonNullable<ResolvedAdapterOptions<never, unknown>['onOutcome']>>[0]['outcome']

function report(options: ResolvedAdapterOptions<never, unknown>, outcome: Outcome, status: number, startedAt: number): void {
  options.onOutcome?.({ outcome, status, durationMs: performance.now() - startedAt })
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

function normalizeQuery(query: Readonly<Record<string, unknown>>): Record<string, string | readonly string[] | undefined> {
  const out: Record<string, string | readonly string[] | undefined> = {}
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined) continue
    if (Array.isArray(value)) out[name] = value.length === 1 ? String(value[0]) : value.map(String)
    else out[name] = typeof value === 'string' ? value : JSON.stringify(value)
  }
  return out
}
