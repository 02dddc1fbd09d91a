import { backoffCeilingMs, jitterMs, type BackoffPolicy } from '../backoff.js'

/** Capped exponential backoff of one event's publish attempts. */
export type { BackoffPolicy } from '../backoff.js'

/** The delay before attempt `attempt + 1`, with equal jitter: between half the cap and the cap. */
export function backoffDelayMs(policy: BackoffPolicy, attempt: number, random: () => number = Math.random): number {
  return Math.round(jitterMs('equal', cappedDelayMs(policy, attempt), random))
}

// Attempt 1 (the first retry) waits about `baseMs`.
function cappedDelayMs(policy: BackoffPolicy, attempt: number): number {
  return backoffCeilingMs(policy, attempt - 1)
}

/**
 * The longest time over which the relay may publish one event again: a lease that runs out
 * (a relay killed after publishing, before marking it sent), then every backoff delay at its
 * cap until the last attempt. A broker deduping over a shorter window lets a duplicate through
 * (the inbox still drops it).
 */
export function retryHorizonMs(policy: BackoffPolicy, maxAttempts: number, leaseMs: number): number {
  let total = leaseMs
  for (let attempt = 1; attempt < maxAttempts; attempt++) total += cappedDelayMs(policy, attempt)
  return total
}
