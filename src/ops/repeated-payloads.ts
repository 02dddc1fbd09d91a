import { oldestFirst } from '../oldest-first.js'

/**
 * Detects the same user sending the same payload under a new `Idempotency-Key` within a window:
 * the sign of a client minting a key per attempt, which makes the whole mechanism do nothing.
 * In process and bounded, so it costs no database round trip. What it misses, by design: repeats
 * that reach two different replicas, repeats further apart than the window, repeats of an entry
 * evicted because more than `maxEntries` payloads arrived within the window, and retries whose
 * payload changes each time (a timestamp in the body makes every fingerprint new). A user who
 * really sends the same order twice within the window is counted too: the metric is a rate to
 * watch, not a verdict on one request.
 */
export interface RepeatedPayloadOptions {
  /** How far apart two requests may be to count as a repeat. (Default: 60000) */
  windowMs?: number
  /** Payloads remembered at most; the oldest are forgotten first. (Default: 10000) */
  maxEntries?: number
}

export interface RepeatedPayloadDetector {
  /** Records a request; true when the same scope sent the same fingerprint under another key within the window. */
  observe(scope: string, key: string, fingerprint: string, now?: number): boolean
  readonly size: number
}

export function createRepeatedPayloadDetector(options: Required<RepeatedPayloadOptions>): RepeatedPayloadDetector {
  const { windowMs, maxEntries } = options
  // A Map iterates in insertion order: deleting and setting again moves an entry to the end, so
  // the first entry is always the least recently seen one.
  const seen = new Map<string, { key: string; at: number }>()
  // The least recently seen entry goes first, through one iterator kept between evictions.
  const forgetOldest = oldestFirst(seen)
  return {
    observe(scope, key, fingerprint, now = Date.now()) {
      const id = `${scope}\u0000${fingerprint}`
      const previous = seen.get(id)
      const repeated = previous !== undefined && previous.key !== key && now - previous.at <= windowMs
      if (previous !== undefined) seen.delete(id)
      seen.set(id, { key, at: now })
      if (seen.size > maxEntries) forgetOldest()
      return repeated
    },
    get size() {
      return seen.size
    },
  }
}
