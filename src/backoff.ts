/**
 * Capped exponential backoff, the one formula behind every retry loop of the library (the
 * engine's transient retries, the client's retries, the outbox relay and inbox, the wait for a
 * claim in flight, the let-go of an orphaned claim): the ceiling of try `exponent` is
 * `min(maxMs, baseMs · 2^exponent)`, and a jitter spreads the delay below it so that workers
 * that failed together do not retry together.
 */
export interface BackoffPolicy {
  /** The ceiling of the first try (exponent 0). */
  readonly baseMs: number
  /** The ceiling never grows past this. */
  readonly maxMs: number
}

/**
 * How a delay is drawn up to its ceiling `c`: `full` uniform in `[0, c]` (the widest spread),
 * `equal` uniform in `[c/2, c]` (spread, but never much shorter than planned), `none` is `c`. The
 * bands are closed: a draw just below 1 can round to `c` itself in floating point.
 */
export type Jitter = 'full' | 'equal' | 'none'

// 2^64 is still finite, so a zero base stays 0 (0 · Infinity would be NaN); any real cap is met far below it.
const MAX_EXPONENT = 64

/** The ceiling of try `exponent` (0 for the first): `min(maxMs, baseMs · 2^exponent)`, a negative exponent counting as 0. */
export function backoffCeilingMs(policy: BackoffPolicy, exponent: number): number {
  return Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(Math.max(0, exponent), MAX_EXPONENT))
}

/** A delay drawn up to `ceilingMs` with the given jitter; `random` returns a number in [0, 1). */
export function jitterMs(jitter: Jitter, ceilingMs: number, random: () => number = Math.random): number {
  switch (jitter) {
    case 'full':
      return random() * ceilingMs
    case 'equal':
      return ceilingMs / 2 + random() * (ceilingMs / 2)
    case 'none':
      return ceilingMs
  }
}

/** The delay before try `exponent + 1`: its ceiling, jittered. */
export function jitteredBackoffMs(policy: BackoffPolicy, exponent: number, jitter: Jitter, random: () => number = Math.random): number {
  return jitterMs(jitter, backoffCeilingMs(policy, exponent), random)
}
