/** The 4xx answers worth another attempt: each says "not now", never "not this". */
const RETRYABLE_CLIENT_ERRORS: ReadonlySet<number> = new Set([
  408, // Request Timeout: the server gave up waiting for the request
  409, // Conflict: the same key is still in progress on the server
  425, // Too Early
  429, // Too Many Requests
])

/** The answers whose `Retry-After` header the client waits for (capped by `maxRetryAfterMs`). */
const RETRY_AFTER_STATUSES: ReadonlySet<number> = new Set([409, 429, 503])

/**
 * Whether a response status is worth another attempt: any 5xx, and exactly 408, 409, 425 and
 * 429. Every other 4xx means the request itself is wrong (a 422 above all): retrying it is a loop.
 *
 * @example
 * ```ts
 * import { isRetryableStatus } from 'oncely/client'
 * isRetryableStatus(503) // true
 * isRetryableStatus(422) // false
 * ```
 */
export function isRetryableStatus(status: number): boolean {
  return (status >= 500 && status <= 599) || RETRYABLE_CLIENT_ERRORS.has(status)
}

export function honoursRetryAfter(status: number): boolean {
  return RETRY_AFTER_STATUSES.has(status)
}

/**
 * Whether a rejected `fetch` (or body read) is a network failure: a refused or reset connection,
 * a DNS failure, a connection closed before the whole response arrived. Node's fetch reports
 * them as a `TypeError` with the socket error as `cause`; a `TypeError` without a cause is a bad
 * request built by the caller and is not retried.
 */
export function isNetworkError(error: unknown): boolean {
  return error instanceof TypeError && error.cause !== undefined
}
