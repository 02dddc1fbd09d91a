import { setTimeout as sleep } from 'node:timers/promises'
import { backoffDelayMs, type BackoffPolicy } from './backoff.js'

/** How a message kept in hand ended. */
export type HeldOutcome = 'applied' | 'exhausted' | 'abandoned'

export interface HeldMessage {
  /** Deliveries the broker made of this message before this one. */
  earlierDeliveries: number
  /** Attempts in all, counting each earlier delivery as one: the bound on a poison message. */
  maxAttempts: number
  backoff: BackoffPolicy
  /** Aborted when the consumer stops: the wait ends and the message is left to the broker. */
  signal: AbortSignal
  /** True once this delivery is void (the channel or connection is gone): nothing more is tried. */
  void: () => boolean
  onFailure: (attempt: number, last: boolean, error: unknown) => void
}

/**
 * Applies one message, retrying in process with capped, jittered backoff while the message
 * stays unacknowledged in hand. Issue 22: a message given back to the broker (a delayed `nak`,
 * a requeue) let the next messages of its key overtake it; held, nothing behind it moves.
 */
export async function applyHeld(apply: () => Promise<void>, held: HeldMessage): Promise<HeldOutcome> {
  for (let attempt = held.earlierDeliveries + 1; ; attempt++) {
    if (held.signal.aborted || held.void()) return 'abandoned'
    try {
      await apply()
      return 'applied'
    } catch (error) {
      const last = attempt >= held.maxAttempts
      held.onFailure(attempt, last, error)
      if (last) return 'exhausted'
    }
    try {
      await sleep(backoffDelayMs(held.backoff, attempt - held.earlierDeliveries), undefined, { signal: held.signal })
    } catch {
      return 'abandoned'
    }
  }
}
