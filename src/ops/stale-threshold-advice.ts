/**
 * Watches the duration of requests that created something, so an operator learns that the stale
 * threshold is too close to the handler's p99 before a slow handler is taken over as if dead
 * (DESIGN.md, "What to watch": the stale threshold must sit above p99). Keeps the last `size`
 * durations in a ring; the p99 is computed at most every `everyN` observations and at a scrape.
 */
export interface StaleThresholdAdvice {
  observe(durationMs: number): void
  /** The current p99 of created requests, in ms (0 before any). */
  p99(): number
  /** True while the p99 is at least half the stale threshold. */
  tooClose(): boolean
}

const MIN_SAMPLES = 20

export function createStaleThresholdAdvice(options: { staleAfterMs: number; size?: number; everyN?: number; onTooClose: (p99Ms: number) => void }): StaleThresholdAdvice {
  const size = options.size ?? 1000
  const everyN = options.everyN ?? 50
  const ring = new Float64Array(size)
  let count = 0
  let sinceCheck = 0
  let warned = false
  let lastP99 = 0

  const check = (): void => {
    sinceCheck = 0
    const filled = Math.min(count, size)
    // A p99 of a handful of requests (a cold start) says nothing yet.
    if (filled < MIN_SAMPLES) return
    const sorted = ring.slice(0, filled).sort()
    lastP99 = sorted[Math.min(filled - 1, Math.ceil(filled * 0.99) - 1)] ?? 0
    const close = lastP99 >= options.staleAfterMs / 2
    // One warning when the p99 crosses the line, and again only after it went back below.
    if (close && !warned) options.onTooClose(lastP99)
    warned = close
  }

  return {
    observe(durationMs) {
      ring[count % size] = durationMs
      count++
      if (++sinceCheck >= everyN || count <= everyN) check()
    },
    p99() {
      check()
      return lastP99
    },
    tooClose() {
      check()
      return warned
    },
  }
}
