import type { Execution } from '../engine/execution.js'
import { fingerprintRequest, pickQuery } from '../engine/fingerprint.js'
import { conflictAnswer, problem, PROBLEM_TYPES, replayAnswer, type HeaderValue, type HttpAnswer } from './answers.js'
import { GuardedExecution, report, type Outcome } from './guarded-execution.js'
import type { ResolvedAdapterOptions } from './options.js'

export * from './answers.js'
export * from './options.js'
export { GuardedExecution, isRetryableStatus } from './guarded-execution.js'

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

function normalizeQuery(query: Readonly<Record<string, unknown>>): Record<string, string | readonly string[] | undefined> {
  const out: Record<string, string | readonly string[] | undefined> = {}
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined) continue
    if (Array.isArray(value)) out[name] = value.length === 1 ? String(value[0]) : value.map(String)
    else out[name] = typeof value === 'string' ? value : JSON.stringify(value)
  }
  return out
}
