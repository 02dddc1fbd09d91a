import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { backoffCeilingMs, jitteredBackoffMs, jitterMs, type Jitter } from '../src/backoff.js'

// The one backoff formula every retry loop uses (issue 24), no PostgreSQL: one pass only.

const policy = fc.record({ baseMs: fc.integer({ min: 0, max: 10_000 }), maxMs: fc.integer({ min: 0, max: 1_000_000 }) })
const exponent = fc.integer({ min: -5, max: 200 })
const unit = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true })

describe('backoffCeilingMs', () => {
  it('doubles from the base per try and stops at the cap', () => {
    expect([0, 1, 2, 5, 6, 40].map((n) => backoffCeilingMs({ baseMs: 25, maxMs: 1000 }, n))).toEqual([25, 50, 100, 800, 1000, 1000])
    expect(backoffCeilingMs({ baseMs: 100, maxMs: 150 }, 0)).toBe(100)
  })

  it('counts a negative exponent as the first try, and a zero base stays zero at any exponent', () => {
    expect(backoffCeilingMs({ baseMs: 40, maxMs: 1000 }, -3)).toBe(40)
    expect(backoffCeilingMs({ baseMs: 0, maxMs: 1000 }, 5000)).toBe(0)
    expect(backoffCeilingMs({ baseMs: 1, maxMs: 1000 }, 5000)).toBe(1000)
  })

  it('is min(cap, base · 2^n): never above the cap, never falling as tries go on', () => {
    fc.assert(
      fc.property(policy, exponent, (p, n) => {
        const ceiling = backoffCeilingMs(p, n)
        expect(Number.isFinite(ceiling)).toBe(true)
        expect(ceiling).toBeLessThanOrEqual(p.maxMs)
        expect(ceiling).toBeLessThanOrEqual(backoffCeilingMs(p, n + 1))
        expect(ceiling).toBe(Math.min(p.maxMs, p.baseMs * 2 ** Math.max(0, n)))
      }),
    )
  })
})

describe('jitterMs', () => {
  it('draws full jitter in [0, c), equal jitter in [c/2, c), none at c', () => {
    expect([0, 0.5, 0.999].map((r) => jitterMs('full', 200, () => r))).toEqual([0, 100, 199.8])
    expect([0, 0.5, 0.999].map((r) => jitterMs('equal', 200, () => r))).toEqual([100, 150, 199.9])
    expect(jitterMs('none', 200, () => 0.3)).toBe(200)
  })

  // Closed bands: found by CI, `equal` with a ceiling of 65 and a draw of 1 - 2^-52 gives 65 itself.
  it('stays within its band for any draw', () => {
    const bands: Record<Jitter, (c: number) => [number, number]> = { full: (c) => [0, c], equal: (c) => [c / 2, c], none: (c) => [c, c] }
    fc.assert(
      fc.property(fc.constantFrom<Jitter>('full', 'equal', 'none'), fc.integer({ min: 0, max: 1_000_000 }), unit, (jitter, ceiling, r) => {
        const [low, high] = bands[jitter](ceiling)
        const delay = jitterMs(jitter, ceiling, () => r)
        expect(delay).toBeGreaterThanOrEqual(low)
        expect(delay).toBeLessThanOrEqual(high)
      }),
    )
  })
})

describe('jitteredBackoffMs', () => {
  it('jitters the ceiling of its try', () => {
    fc.assert(
      fc.property(policy, exponent, unit, fc.constantFrom<Jitter>('full', 'equal', 'none'), (p, n, r, jitter) => {
        expect(jitteredBackoffMs(p, n, jitter, () => r)).toBe(jitterMs(jitter, backoffCeilingMs(p, n), () => r))
      }),
    )
  })
})
