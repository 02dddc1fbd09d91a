/** What a lease needs to know and whom it tells. */
export interface LeaseOptions {
  /** One fenced renewal: true when it landed, false when the fence was gone. */
  renew: () => Promise<boolean>
  /** How often the lease is renewed. */
  renewEveryMs: number
  /** How long after its last renewal the claim may look stale to a retry. */
  staleAfterMs: number
  /** When set, how long the holder may hold the claim in all before `onDeadline`. (Default: no deadline) */
  deadlineMs?: number
  /** A renewal found the fence gone: someone else holds the claim now. */
  onRefused: () => void
  /** The deadline passed. (Default: nothing) */
  onDeadline?: () => void
}

/**
 * The lease on one claim (Invariant 11: a live claim never goes stale under its owner): renewed
 * on a timer, extended by every fenced write that lands, and given up by `stop`. It knows when
 * the claim may look stale to others (`staleAt`), the point past which the holder must not
 * write. Its timers never keep a process alive on their own.
 */
export class Lease {
  /** When the last write that renewed the lease was sent (`performance.now()`). */
  #sentAt = performance.now()
  #stopped = false
  readonly #renewal: NodeJS.Timeout
  readonly #deadline: NodeJS.Timeout | undefined
  readonly #options: LeaseOptions

  constructor(options: LeaseOptions) {
    this.#options = options
    this.#renewal = setInterval(() => void this.#renew(), options.renewEveryMs)
    this.#renewal.unref()
    const { deadlineMs, onDeadline } = options
    // Issue 8, path 13: the owner itself enforces the deadline; it never takes a live claim.
    this.#deadline = deadlineMs === undefined ? undefined : setTimeout(() => onDeadline?.(), deadlineMs)
    this.#deadline?.unref()
  }

  /** A fenced write sent at `sentAt` (`performance.now()`) landed: it renewed the lease as well. */
  extend(sentAt: number): void {
    this.#sentAt = Math.max(this.#sentAt, sentAt)
  }

  /** The `performance.now()` time from which a retry may find the claim stale and take it over. */
  get staleAt(): number {
    return this.#sentAt + this.#options.staleAfterMs
  }

  /** No more renewals and no deadline: the holder ended or gave the claim up. */
  stop(): void {
    this.#stopped = true
    clearInterval(this.#renewal)
    clearTimeout(this.#deadline)
  }

  async #renew(): Promise<void> {
    if (this.#stopped) return
    const sentAt = performance.now()
    try {
      if (await this.#options.renew()) this.extend(sentAt)
      else if (!this.#stopped) this.#options.onRefused()
    } catch {
      // A failed renewal is retried at the next tick; if the database stays away, the claim goes
      // stale and a retry takes it over, and this holder's fenced writes then fail.
    }
  }
}
