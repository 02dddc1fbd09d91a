/** The service's own problem types (RFC 9457); the idempotency answers come from the adapter. */
const TYPE_BASE = 'https://oncely.dev/problems/'

export interface Problem {
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
