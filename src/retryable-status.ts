/** The 4xx answers worth another attempt: each says "not now", never "not this". */
const RETRYABLE_CLIENT_ERRORS: ReadonlySet<number> = new Set([
  408, // Request Timeout: the server gave up waiting for the request
  409, // Conflict: the same key is still in progress on the server
  425, // Too Early
  429, // Too Many Requests
])

/**
 * Whether a response status is worth another attempt with the same key: any 5xx, and exactly 408,
 * 409, 425 and 429. The client retries these; the adapters store none of them (the key stays
 * retryable). Every other 4xx means the request itself is wrong (a 422 above all).
 */
export function isRetryableStatus(status: number): boolean {
  return (status >= 500 && status <= 599) || RETRYABLE_CLIENT_ERRORS.has(status)
}
