/** Capped exponential backoff of one event's publish attempts. */
export interface BackoffPolicy {
  baseMs: number
  maxMs: number
}

/** The delay before attempt `attempt + 1`, with equal jitter: between half the cap and the cap. */
export function backoffDelayMs(policy: BackoffPolicy, attempt: number, random: () => number = Math.random): number {
  const capped = cappedDelayMs(policy, attempt)
  return Math.round(capped / 2 + random() * (capped / 2))
}

function cappedDelayMs(policy: BackoffPolicy, attempt: number): number {
  return Math.min(policy.maxMs, policy.baseMs * 2 ** Math.max(0, Math.min(attempt - 1, 40)))
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
