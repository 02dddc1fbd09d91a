import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { createRepeatedPayloadDetector } from '../../src/ops/repeated-payloads.js'

/**
 * The detector's rule written the slow, obvious way: an array of entries, least recently seen
 * first, each (scope, fingerprint) once. The detector keeps a Map and evicts through one iterator
 * kept between evictions (issue 21); it must answer as this does for every sequence.
 */
function referenceDetector(windowMs: number, maxEntries: number) {
  const entries: Array<{ id: string; key: string; at: number }> = []
  return {
    observe(scope: string, key: string, fingerprint: string, now: number): boolean {
      const id = `${scope}\u0000${fingerprint}`
      const index = entries.findIndex((entry) => entry.id === id)
      const previous = index === -1 ? undefined : entries[index]
      if (index !== -1) entries.splice(index, 1)
      entries.push({ id, key, at: now })
      if (entries.length > maxEntries) entries.shift()
      return previous !== undefined && previous.key !== key && now - previous.at <= windowMs
    },
    get size() {
      return entries.length
    },
  }
}

const observation = fc.record({
  scope: fc.constantFrom('1', '2'),
  key: fc.constantFrom('a', 'b', 'c'),
  fingerprint: fc.integer({ min: 0, max: 40 }).map((n) => `v2:${n}`),
  elapsedMs: fc.integer({ min: 0, max: 30 }),
})

describe('the repeated-payload detector', () => {
  it('answers as the least-recently-seen rule does, whatever it forgets and sees again', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 12 }), fc.array(observation, { maxLength: 400 }), (maxEntries, observations) => {
        const detector = createRepeatedPayloadDetector({ windowMs: 100, maxEntries })
        const reference = referenceDetector(100, maxEntries)
        let now = 0
        for (const { scope, key, fingerprint, elapsedMs } of observations) {
          now += elapsedMs
          expect(detector.observe(scope, key, fingerprint, now)).toBe(reference.observe(scope, key, fingerprint, now))
          expect(detector.size).toBe(reference.size)
        }
      }),
      { numRuns: 300 },
    )
  })

  it('keeps to the rule across many tables full of forgotten entries', () => {
    // Far more distinct payloads than it remembers, some seen again: V8 compacts the Map's table
    // many times under the iterator the detector keeps.
    const detector = createRepeatedPayloadDetector({ windowMs: 60_000, maxEntries: 64 })
    const reference = referenceDetector(60_000, 64)
    let repeats = 0
    for (let n = 0; n < 20_000; n++) {
      const fingerprint = `v2:${n % 7 === 0 ? n - 50 : n}`
      const answer = detector.observe('1', `k${n}`, fingerprint, n)
      expect(answer).toBe(reference.observe('1', `k${n}`, fingerprint, n))
      if (answer) repeats++
    }
    expect(detector.size).toBe(64)
    // Seen 50 payloads ago, under another key: remembered, within the window.
    expect(repeats).toBeGreaterThan(2_000)
  })
})
