import { describe, expect, it } from 'vitest'
import { backoffDelay, isRetryableStatus, mintKey, parseRetryAfter, fingerprintOperation } from '../../src/client/index.js'

describe('retry policy', () => {
  it('retries 5xx and exactly 408, 409, 425 and 429', () => {
    const retried = [408, 409, 425, 429, 500, 502, 503, 504, 599]
    const final = [200, 201, 204, 301, 304, 400, 401, 403, 404, 405, 410, 412, 413, 415, 422, 428, 431, 451]
    expect(retried.filter((s) => !isRetryableStatus(s))).toEqual([])
    expect(final.filter((s) => isRetryableStatus(s))).toEqual([])
  })

  it('reads Retry-After as seconds or as an HTTP date', () => {
    const now = Date.parse('Sun, 06 Nov 1994 08:49:37 GMT')
    expect(parseRetryAfter('1', now)).toBe(1000)
    expect(parseRetryAfter(' 120 ', now)).toBe(120_000)
    expect(parseRetryAfter('Sun, 06 Nov 1994 08:49:40 GMT', now)).toBe(3000)
    expect(parseRetryAfter('Sun, 06 Nov 1994 08:49:00 GMT', now)).toBe(0)
    expect(parseRetryAfter(null, now)).toBeUndefined()
    expect(parseRetryAfter('-1', now)).toBeUndefined()
    expect(parseRetryAfter('1.5', now)).toBeUndefined()
    expect(parseRetryAfter('soon', now)).toBeUndefined()
    expect(parseRetryAfter('2024-01-01', now)).toBeUndefined()
  })

  it('reads Retry-After in all three HTTP date forms of RFC 9110 §5.6.7', () => {
    const now = Date.parse('Sun, 06 Nov 1994 08:49:37 GMT')
    expect(parseRetryAfter('Sun, 06 Nov 1994 08:49:40 GMT', now)).toBe(3000) // IMF-fixdate
    expect(parseRetryAfter('Sunday, 06-Nov-94 08:49:40 GMT', now)).toBe(3000) // obsolete RFC 850
    expect(parseRetryAfter('Sun Nov  6 08:49:40 1994', now)).toBe(3000) // obsolete asctime
    expect(parseRetryAfter('Sun Nov 16 08:49:40 1994', now)).toBe(10 * 86_400_000 + 3000)
    // RFC 850's two-digit year: more than 50 years ahead is the last century.
    const in2030 = Date.parse('Tue, 01 Jan 2030 00:00:00 GMT')
    expect(parseRetryAfter('Wednesday, 01-Jan-31 00:00:05 GMT', in2030)).toBe(365 * 86_400_000 + 5000)
    expect(parseRetryAfter('Sunday, 06-Nov-94 08:49:40 GMT', in2030)).toBe(0)
    for (const bad of ['Sun, 31 Feb 1994 08:49:40 GMT', 'Sun, 06 Nov 1994 25:49:40 GMT', 'Sun, 06 Nov 1994 08:49:40 PST', 'Sun Nov 6 08:49:40 1994 GMT', '06 Nov 1994 08:49:40 GMT']) {
      expect(parseRetryAfter(bad, now), bad).toBeUndefined()
    }
  })

  it('backs off exponentially with full jitter under a cap', () => {
    expect([1, 2, 3, 4, 5].map((retry) => backoffDelay(retry, 100, 1000, () => 0.999999))).toEqual([99, 199, 399, 799, 999])
    expect([1, 2, 3].map((retry) => backoffDelay(retry, 100, 1000, () => 0))).toEqual([0, 0, 0])
    const spread = new Set(Array.from({ length: 200 }, () => backoffDelay(3, 100, 10_000, Math.random)))
    expect(Math.max(...spread)).toBeLessThan(400)
    expect(spread.size).toBeGreaterThan(50)
  })
})

describe('keys and fingerprints', () => {
  it('mints UUIDv7 keys that sort by time', () => {
    const key = mintKey(Date.parse('2025-01-01T00:00:00Z'))
    expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(key.startsWith('01941f29-7c00')).toBe(true)
    expect(mintKey(1000) < mintKey(2000)).toBe(true)
    expect(new Set(Array.from({ length: 1000 }, () => mintKey())).size).toBe(1000)
  })

  it('fingerprints method, URL and canonical body, ignoring key order', () => {
    const url = 'http://127.0.0.1/v1/charges'
    const base = fingerprintOperation('POST', url, { amount: 1000, currency: 'usd' })
    expect(fingerprintOperation('post', url, { currency: 'usd', amount: 1000 })).toBe(base)
    expect(fingerprintOperation('POST', url, { amount: 1001, currency: 'usd' })).not.toBe(base)
    expect(fingerprintOperation('PATCH', url, { amount: 1000, currency: 'usd' })).not.toBe(base)
    expect(fingerprintOperation('POST', `${url}?x=1`, { amount: 1000, currency: 'usd' })).not.toBe(base)
    expect(fingerprintOperation('POST', url, '{"amount":1000,"currency":"usd"}')).not.toBe(base)
    expect(fingerprintOperation('POST', url, undefined)).toMatch(/^[0-9a-f]{64}$/)
  })
})
