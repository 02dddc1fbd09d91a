import type { ClaimWatch, WatchedClaim } from '../../engine/store.js'
import type { PoolLike } from './executor.js'
import { WakeUpListener } from './wake-up-listener.js'

/** How long the LISTEN connection stays once nobody waits, so a steady trickle of duplicates does not reconnect each time. */
export const LISTEN_LINGER_MS = 250

interface Waiter {
  wake: () => void
  marked: boolean
  stopped: boolean
}

/**
 * The store's waiting duplicates (issue 23) and their one shared LISTEN connection, opened when
 * the first waits and let go `LISTEN_LINGER_MS` after the last has stopped: no connection per
 * waiter, none at all while nobody waits. A waiter marks the claim it waits for (`mark`) once the
 * connection listens, so the claim's end notifies; a notification only wakes it to read the row,
 * the truth (docs/conventions.md, SQL). A lost connection wakes every waiter, which then polls at
 * its unwatched pace until the reconnect, and the reconnect wakes them again: what ended meanwhile
 * was not notified to anyone.
 */
export class ClaimWatcher {
  readonly #pool: PoolLike
  readonly #channel: string
  readonly #mark: (claim: WatchedClaim) => Promise<boolean>
  readonly #waiters = new Map<string, Set<Waiter>>()
  #count = 0
  #listener: WakeUpListener | undefined
  #onListening: Array<() => void> = []
  #linger: NodeJS.Timeout | undefined
  /** LISTEN connections made so far, reconnects included (for tests and diagnostics). */
  connections = 0

  constructor(pool: PoolLike, channel: string, mark: (claim: WatchedClaim) => Promise<boolean>) {
    this.#pool = pool
    this.#channel = channel
    this.#mark = mark
  }

  /** Waiters watching now. */
  get waiting(): number {
    return this.#count
  }

  /** Claims watched now, by one waiter or more (for tests and diagnostics). */
  get claims(): number {
    return this.#waiters.size
  }

  watch(claim: WatchedClaim, wake: () => void): ClaimWatch {
    const waiter: Waiter = { wake, marked: false, stopped: false }
    const same = this.#waiters.get(claim.claimId) ?? new Set()
    same.add(waiter)
    this.#waiters.set(claim.claimId, same)
    this.#count++
    clearTimeout(this.#linger)
    this.#linger = undefined
    const listener = this.#listen()
    void this.#arm(listener, claim, waiter)
    return new Watch(waiter, listener, () => this.#stop(claim.claimId, waiter))
  }

  #listen(): WakeUpListener {
    if (this.#listener) return this.#listener
    const listener: WakeUpListener = new WakeUpListener(this.#pool, this.#channel, (claimId) => this.#wake(this.#waiters.get(claimId)), (line) => console.warn(line), 'oncely store', {
      connected: (reconnected) => {
        this.connections++
        for (const resolve of this.#onListening.splice(0)) resolve()
        if (reconnected) this.#wakeAll()
      },
      lost: () => this.#wakeAll(),
    })
    this.#listener = listener
    listener.start()
    return listener
  }

  /** Marks the claim once the connection listens, so no notification of its end can be missed. */
  async #arm(listener: WakeUpListener, claim: WatchedClaim, waiter: Waiter): Promise<void> {
    if (!listener.listening) await new Promise<void>((resolve) => this.#onListening.push(resolve))
    if (waiter.stopped) return
    try {
      waiter.marked = await this.#mark(claim)
    } catch {
      // Not marked: this waiter is polled alone, as without LISTEN.
    }
    // The claim ended or changed before it could be marked: no notification will come, read now.
    if (!waiter.marked && !waiter.stopped) waiter.wake()
  }

  #stop(claimId: string, waiter: Waiter): void {
    if (waiter.stopped) return
    waiter.stopped = true
    const same = this.#waiters.get(claimId)
    same?.delete(waiter)
    if (same?.size === 0) this.#waiters.delete(claimId)
    if (--this.#count > 0) return
    this.#linger = setTimeout(() => {
      this.#linger = undefined
      const listener = this.#listener
      this.#listener = undefined
      this.#onListening = []
      void listener?.stop()
    }, LISTEN_LINGER_MS)
    this.#linger.unref()
  }

  #wake(waiters: Set<Waiter> | undefined): void {
    for (const waiter of waiters ?? []) waiter.wake()
  }

  #wakeAll(): void {
    for (const waiters of this.#waiters.values()) this.#wake(waiters)
  }
}

/**
 * One waiter's watch. A class, so `live` is a getter of its prototype: a getter of an object
 * literal is a closure per watch that V8's young collections keep until a full one, with all it
 * reaches (issue 21).
 */
class Watch implements ClaimWatch {
  readonly #waiter: Waiter
  readonly #listener: WakeUpListener
  readonly stop: () => void

  constructor(waiter: Waiter, listener: WakeUpListener, stop: () => void) {
    this.#waiter = waiter
    this.#listener = listener
    this.stop = stop
  }

  get live(): boolean {
    return this.#waiter.marked && this.#listener.listening
  }
}
