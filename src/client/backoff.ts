/**
 * Exponential backoff with full jitter: the wait before retry `n` (1 for the first retry) is
 * uniform in `[0, min(maxDelayMs, baseDelayMs × 2^(n−1)))`, so clients that failed together
 * do not retry together.
 *
 * @example
 * ```ts
 * import { backoffDelay } from 'oncely/client'
 * const wait = backoffDelay(3, 100, 10_000, Math.random) // somewhere in [0, 400)
 * ```
 */
export function backoffDelay(retry: number, baseDelayMs: number, maxDelayMs: number, random: () => number): number {
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.max(0, retry - 1))
  return Math.floor(random() * ceiling)
}

/**
 * Reads a `Retry-After` header (RFC 9110 §10.2.3): a number of seconds or an HTTP date.
 * Returns the wait in milliseconds (0 for a date in the past), or `undefined` when the header is
 * absent or unreadable.
 *
 * @example
 * ```ts
 * import { parseRetryAfter } from 'oncely/client'
 * parseRetryAfter('1') // 1000
 * parseRetryAfter('Sun, 06 Nov 1994 08:49:40 GMT', Date.parse('Sun, 06 Nov 1994 08:49:37 GMT')) // 3000
 * ```
 */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) return undefined
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  // An HTTP date always names a weekday and a GMT zone; anything else is not a date here.
  if (!/^[A-Za-z]{3},? .*GMT$/.test(text)) return undefined
  const at = Date.parse(text)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}
