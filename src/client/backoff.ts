import { jitteredBackoffMs } from '../backoff.js'
import { parseHttpDate } from './http-date.js'

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
  return Math.floor(jitteredBackoffMs({ baseMs: baseDelayMs, maxMs: maxDelayMs }, retry - 1, 'full', random))
}

/**
 * Reads a `Retry-After` header (RFC 9110 §10.2.3): a number of seconds or an HTTP date in any
 * of its three forms (IMF-fixdate, and the obsolete RFC 850 and asctime forms, §5.6.7).
 * Returns the wait in milliseconds (0 for a date in the past), or `undefined` when the header is
 * absent or unreadable.
 *
 * @example
 * ```ts
 * import { parseRetryAfter } from 'oncely/client'
 * parseRetryAfter('1') // 1000
 * const now = Date.parse('Sun, 06 Nov 1994 08:49:37 GMT')
 * parseRetryAfter('Sun, 06 Nov 1994 08:49:40 GMT', now) // 3000
 * parseRetryAfter('Sunday, 06-Nov-94 08:49:40 GMT', now) // 3000
 * parseRetryAfter('Sun Nov  6 08:49:40 1994', now) // 3000
 * ```
 */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) return undefined
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const at = parseHttpDate(text, now)
  return at === undefined ? undefined : Math.max(0, at - now)
}
