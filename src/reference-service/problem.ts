import type { OperationState } from '../adapters/hono.js'

/** The service's own problem types (RFC 9457); the idempotency answers come from the adapter. */
const TYPE_BASE = 'https://oncely.dev/problems/'

/**
 * What a client may safely do next, in every problem the service answers, as the adapter's own
 * problems say it (docs/adapters.md, Answers): `retry_same_key`, whether the same request with the
 * same key may get another answer later; `new_key_safe`, whether the service knows nothing ran
 * for this request; `operation_state`, the key's operation as far as the service knows.
 */
export interface ProblemAdvice {
  retry_same_key: boolean
  new_key_safe: boolean
  operation_state: OperationState
}

/** Refused before any claim and any call: nothing ran, and the same request is refused again. */
export const REFUSED_BEFORE_ANY_CLAIM: ProblemAdvice = Object.freeze({ retry_same_key: false, new_key_safe: true, operation_state: 'none' })

/** A fault whose effect on the key is not known: the same key is safe to retry, a new one is not. */
export const OUTCOME_NOT_KNOWN: ProblemAdvice = Object.freeze({ retry_same_key: true, new_key_safe: false, operation_state: 'unknown' })

export interface Problem extends ProblemAdvice {
  /** The last segment of the `type` URI, e.g. `invalid-request`. */
  type: string
  title: string
  status: number
  detail: string
  [extension: string]: unknown
}

export function problemBody(problem: Problem): string {
  return JSON.stringify({ ...problem, type: `${TYPE_BASE}${problem.type}` })
}

/** Answers with `application/problem+json`. */
export function problem(value: Problem, headers: Record<string, string> = {}): Response {
  return new Response(problemBody(value), { status: value.status, headers: { 'content-type': 'application/problem+json', ...headers } })
}
