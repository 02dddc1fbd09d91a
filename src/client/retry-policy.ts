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

/**
 * Whether a response is worth another attempt with the same key: a retryable status, unless the
 * server says a retry with this key cannot change the answer (`retry_same_key: false`, such as
 * oncely's 500 `…/result-unavailable` or `…/outcome-not-recorded`).
 */
export function isWorthRetrying(status: number, advice: { readonly retrySameKey: boolean | undefined }): boolean {
  return isRetryableStatus(status) && advice.retrySameKey !== false
}

export function honoursRetryAfter(status: number): boolean {
  return RETRY_AFTER_STATUSES.has(status)
}

/**
 * The error codes of a network failure, as Node's sockets, DNS and undici report them: the
 * connection was refused, reset, cut or timed out, or the host could not be resolved. Nothing
 * else a `fetch` rejects with is retried: a bad port, a refused TLS certificate, a body that
 * cannot be decoded or a detached buffer fail the same way every time.
 */
const NETWORK_FAILURE_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED', // nothing listens there (yet)
  'ECONNRESET', // the peer reset the connection
  'ECONNABORTED',
  'EPIPE', // the peer closed while the request was being written
  'ETIMEDOUT', // the kernel gave up connecting or sending
  'ENETUNREACH',
  'ENETDOWN',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENOTFOUND', // DNS: no such name (also what a resolver outage can look like)
  'EAI_AGAIN', // DNS: temporary failure
  'UND_ERR_SOCKET', // undici: the socket closed before the whole response arrived
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
])

/**
 * The code of the network failure behind a rejected `fetch` (or body read), or `undefined` when
 * it is not one. Node's fetch rejects with a `TypeError` whose `cause` is the transport's error;
 * a connection attempted to several addresses reports an `AggregateError` of them.
 */
export function networkFailureCode(error: unknown): string | undefined {
  if (!(error instanceof TypeError)) return undefined
  const seen = new Set<unknown>()
  const pending: unknown[] = [error.cause]
  while (pending.length > 0) {
    const candidate = pending.shift()
    if (typeof candidate !== 'object' || candidate === null || seen.has(candidate)) continue
    seen.add(candidate)
    const code = 'code' in candidate ? candidate.code : undefined
    if (typeof code === 'string' && NETWORK_FAILURE_CODES.has(code)) return code
    if (candidate instanceof AggregateError) pending.push(...(candidate.errors as unknown[]))
    if ('cause' in candidate) pending.push(candidate.cause)
  }
  return undefined
}
