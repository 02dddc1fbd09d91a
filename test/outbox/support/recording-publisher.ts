import type { OutboxMessage, Publisher } from '../../../src/outbox/index.js'

/** A Publisher that keeps what it was given, in order; `failIds` makes chosen events fail. */
export interface RecordingPublisher extends Publisher {
  readonly messages: OutboxMessage[]
  /** Ids whose publish rejects while they are in the set. */
  readonly failIds: Set<string>
  /** The most publishes that were ever in flight at once. */
  maxInFlight(): number
  /** Resolves once `count` messages have been published. */
  waitFor(count: number): Promise<void>
}

export function recordingPublisher(options: { hold?: () => Promise<void> } = {}): RecordingPublisher {
  const messages: OutboxMessage[] = []
  const failIds = new Set<string>()
  const waiters: Array<{ count: number; resolve: () => void }> = []
  let inFlight = 0
  let most = 0
  return {
    name: 'recording',
    messages,
    failIds,
    maxInFlight: () => most,
    waitFor(count) {
      if (messages.length >= count) return Promise.resolve()
      return new Promise((resolve) => waiters.push({ count, resolve }))
    },
    async publish(message) {
      inFlight++
      most = Math.max(most, inFlight)
      try {
        await options.hold?.()
        if (failIds.has(message.id)) throw new Error(`refused ${message.id}`)
        messages.push(message)
        for (const waiter of waiters.filter((w) => messages.length >= w.count)) {
          waiters.splice(waiters.indexOf(waiter), 1)
          waiter.resolve()
        }
      } finally {
        inFlight--
      }
    },
    async close() {},
  }
}
