/** One attempt of a call, as reported by `onRetry`, on a response and on a give-up error. */
export interface Attempt {
  /** 1 for the first attempt. */
  readonly number: number
  /** The `Idempotency-Key` it carried; `undefined` for GET, HEAD, PUT, DELETE and OPTIONS. */
  readonly key: string | undefined
  /** How long the client waited before sending it (0 for the first attempt). */
  readonly delayMs: number
  /** The response status, when a whole response arrived. */
  readonly status: number | undefined
  /** Why no whole response arrived (network error, attempt timeout). */
  readonly error: Error | undefined
  readonly durationMs: number
}

/**
 * One line for logs: `attempt 2: 503 in 12 ms` or `attempt 1: ECONNRESET (other side closed) in 3 ms`.
 *
 * @example
 * ```ts
 * import { createClient, describeAttempt } from 'oncely/client'
 * const client = createClient({
 *   baseUrl: 'http://127.0.0.1:3000',
 *   onRetry: ({ attempt, delayMs }) => console.warn(`${describeAttempt(attempt)}; retrying in ${delayMs} ms`),
 * })
 * ```
 */
export function describeAttempt(attempt: Attempt): string {
  const outcome = attempt.status !== undefined ? String(attempt.status) : describeError(attempt.error)
  return `attempt ${attempt.number}: ${outcome} in ${Math.round(attempt.durationMs)} ms`
}

/** Names the socket error under Node's generic `fetch failed` / `terminated`. */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error)
  const cause: unknown = error.cause
  if (cause instanceof Error) {
    const code = 'code' in cause && typeof cause.code === 'string' ? cause.code : undefined
    return code ? `${code} (${cause.message})` : `${error.message}: ${cause.message}`
  }
  return error.message
}
