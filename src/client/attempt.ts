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
  /** Why no whole response arrived (network failure, attempt timeout, a local fault). */
  readonly error: Error | undefined
  /**
   * The transport's code when `error` is a network failure, the only errors retried
   * (`ECONNREFUSED`, `ECONNRESET`, `ENOTFOUND`, `EAI_AGAIN`, `UND_ERR_SOCKET`,
   * `UND_ERR_CONNECT_TIMEOUT`…); `undefined` otherwise.
   */
  readonly networkFailure: string | undefined
  readonly durationMs: number
}

/**
 * One line for logs: `attempt 2: 503 in 12 ms`, `attempt 1: ECONNRESET (network failure: read
 * ECONNRESET) in 3 ms`, or for an error that is not retried `attempt 1: fetch failed: bad port
 * (not a network failure, not retried) in 1 ms`.
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
  const outcome = attempt.status !== undefined ? String(attempt.status) : describeFailure(attempt)
  return `attempt ${attempt.number}: ${outcome} in ${Math.round(attempt.durationMs)} ms`
}

function describeFailure(attempt: Attempt): string {
  const { error, networkFailure } = attempt
  if (networkFailure !== undefined) return `${networkFailure} (network failure: ${deepestMessage(error)})`
  if (error?.name === 'AttemptTimeoutError') return error.message
  return `${describeError(error)} (not a network failure, not retried)`
}

/** The transport's own message under Node's generic `fetch failed` / `terminated`. */
function deepestMessage(error: unknown): string {
  let current: unknown = error
  while (current instanceof Error && current.cause instanceof Error) current = current.cause
  if (current instanceof AggregateError && current.errors[0] instanceof Error) return current.errors[0].message
  return current instanceof Error ? current.message : String(current)
}

/** Names the error under Node's generic `fetch failed` / `terminated`. */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error)
  const cause: unknown = error.cause
  if (cause instanceof Error) {
    const code = 'code' in cause && typeof cause.code === 'string' ? cause.code : undefined
    return code ? `${code} (${cause.message})` : `${error.message}: ${cause.message}`
  }
  return error.message
}
