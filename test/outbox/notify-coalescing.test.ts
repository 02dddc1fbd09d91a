import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { createOutbox, createRelay, outboxBacklog } from '../../src/outbox/index.js'
import { withTransaction } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { recordingPublisher } from './support/recording-publisher.js'
import { waitUntil } from './support/wait.js'

// Issue 21: a NOTIFY in every commit serialises the commits of the whole database; writers send
// at most one per `notifyCoalesceMs`, and the relay looks again `followUpMs` after every batch it
// published, so the events of the transactions in between still leave at once, not a poll later.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const commitEvent = (outbox: ReturnType<typeof createOutbox>, n: number) =>
  withTransaction(db.pool, async (tx) => (await outbox.enqueue(tx, { type: 'coalesce.test', payload: { n } })).id)

/** Counts the notifications on the outbox's channel while `work` runs (each commit is waited for). */
async function notificationsDuring(channel: string, work: () => Promise<void>): Promise<number> {
  const listener = await db.pool.connect()
  let count = 0
  const onNotification = () => void count++
  listener.on('notification', onNotification)
  try {
    await listener.query(`LISTEN "${channel.replaceAll('"', '""')}"`)
    await work()
    // A NOTIFY reaches the listener after its commit answered: one more round trip on the
    // listener's own connection is enough for any of them to have arrived.
    await listener.query('SELECT 1')
    await listener.query(`UNLISTEN "${channel.replaceAll('"', '""')}"`)
    return count
  } finally {
    listener.off('notification', onNotification)
    listener.release()
  }
}

describe('notifyCoalesceMs', () => {
  it('one NOTIFY for the transactions within the window; 0 sends one in each', async () => {
    const coalesced = createOutbox({ schema: db.schema, notifyCoalesceMs: 60_000 })
    expect(await notificationsDuring(coalesced.channel, async () => {
      for (let n = 0; n < 5; n++) await commitEvent(coalesced, n)
    })).toBe(1)
    const every = createOutbox({ schema: db.schema, notifyCoalesceMs: 0 })
    expect(await notificationsDuring(every.channel, async () => {
      for (let n = 0; n < 5; n++) await commitEvent(every, n)
    })).toBe(5)
    const none = createOutbox({ schema: db.schema, notify: false })
    expect(await notificationsDuring(none.channel, () => commitEvent(none, 0).then(() => undefined))).toBe(0)
  })

  it('a statement written without the NOTIFY is the plain enqueue; a bad window is refused by name', async () => {
    const outbox = createOutbox({ schema: db.schema, notifyCoalesceMs: 60_000 })
    const first = await outbox.prepareEnqueue({ type: 'coalesce.test', payload: {} })
    const second = await outbox.prepareEnqueue({ type: 'coalesce.test', payload: {} })
    expect(first.statement.text).toContain('pg_notify')
    expect(second.statement.text).not.toContain('pg_notify')
    expect(second.statement.values).toHaveLength(6)
    for (const bad of [-1, 1.5, Number.NaN]) expect(() => createOutbox({ notifyCoalesceMs: bad })).toThrow(/notifyCoalesceMs/)
    expect(() => createRelay({ pool: db.pool, publisher: recordingPublisher(), followUpMs: 0 })).toThrow(/followUpMs/)
  })

  it('the relay publishes an event whose writer sent no NOTIFY right after a batch, without waiting for its poll', { timeout: 30_000 }, async () => {
    const outbox = createOutbox({ schema: db.schema, notifyCoalesceMs: 60_000 })
    const publisher = recordingPublisher()
    // A poll this long would fail the test: only the NOTIFY and the follow-up looks can find them.
    const relay = createRelay({ pool: db.pool, schema: db.schema, publisher, pollIntervalMs: 120_000, followUpMs: 1000, log: () => undefined })
    await relay.start()
    try {
      await waitUntil('the relay listens', async () => relay.listenConnections > 0)
      // Wait out the first look the relay makes when its LISTEN connects.
      await new Promise((resolve) => setTimeout(resolve, 200))
      // The tests above left events behind: wait until the relay has drained them.
      await waitUntil('the earlier events are published', async () => Number((await outboxBacklog({ pool: db.pool, schema: db.schema })).pending) === 0)
      const published = () => publisher.messages.map((message) => message.id)
      const first = await commitEvent(outbox, 1)
      await waitUntil('the first event is published', async () => published().includes(first))
      const second = await commitEvent(outbox, 2)
      await waitUntil('the second event is published', async () => published().includes(second), 15_000)
      expect(published().slice(-2)).toEqual([first, second])
    } finally {
      await relay.stop()
    }
  })
})

describe('the relay under a steady stream of events', () => {
  // Issue 21: a claim at once after every batch that published found one or two events each
  // time under load; a follow-up apart, one batch takes what the writers committed meanwhile.
  it('after a batch that was not full, claims again a follow-up later, not at once; a full batch is followed at once', { timeout: 60_000 }, async () => {
    // One NOTIFY, the first commit's, and no poll within the test: after the batch it wakes, the
    // follow-ups are the relay's only looks.
    const outbox = createOutbox({ schema: db.schema, notifyCoalesceMs: 60_000 })
    const publisher = recordingPublisher()
    const followUpMs = 250
    const relay = createRelay({ pool: db.pool, schema: db.schema, publisher, pollIntervalMs: 120_000, followUpMs, batchSize: 1000, log: () => undefined })
    const claims = vi.spyOn(relay, 'runOnce')
    await relay.start()
    try {
      await waitUntil('the relay listens', async () => relay.listenConnections > 0)
      await waitUntil('the earlier events are published', async () => Number((await outboxBacklog({ pool: db.pool, schema: db.schema })).pending) === 0)
      // Wait out the looks that follow the first one.
      await new Promise((resolve) => setTimeout(resolve, 3 * followUpMs))
      const before = claims.mock.calls.length
      const started = performance.now()
      const committed: string[] = []
      // Four writers, each committing an event every few milliseconds for 1.5 s.
      const writer = async (w: number) => {
        for (let n = 0; performance.now() - started < 1500; n++) {
          committed.push(await commitEvent(outbox, w * 10_000 + n))
          await new Promise((resolve) => setTimeout(resolve, 5))
        }
      }
      await Promise.all([0, 1, 2, 3].map(writer))
      const published = () => new Set(publisher.messages.map((message) => message.id))
      await waitUntil('every event is published', () => committed.every((id) => published().has(id)), 10_000)
      const elapsedMs = performance.now() - started
      // One claim per follow-up at most, and the two empty ones after the last batch.
      const bound = Math.ceil(elapsedMs / followUpMs) + 3
      // The writers' pace depends on the machine (a loaded CI runner committed 112 events, a quiet
      // one about 700). The bound tells the loops apart only while every claim finds events behind
      // it: then a relay that claims again at once after a batch that published anything claims as
      // fast as its cycle goes (seen: 32 and 36 claims against a bound of 10 and 11, ~700 events).
      // Four events per follow-up on average keep that so.
      expect(committed.length).toBeGreaterThan(4 * bound)
      expect(claims.mock.calls.length - before).toBeLessThanOrEqual(bound)
    } finally {
      await relay.stop()
    }

    // A backlog: 50 events, batches of 10. Were a full batch followed a follow-up later (5 s),
    // they would take 20 s; claimed at once, they leave in well under that.
    const backlog: string[] = []
    for (let n = 0; n < 50; n++) backlog.push(await commitEvent(outbox, n))
    const draining = createRelay({ pool: db.pool, schema: db.schema, publisher, listen: false, pollIntervalMs: 120_000, followUpMs: 5000, batchSize: 10, log: () => undefined })
    const startedDrain = performance.now()
    await draining.start()
    try {
      await waitUntil('the backlog is published', () => backlog.every((id) => publisher.messages.some((message) => message.id === id)), 15_000)
      expect(performance.now() - startedDrain).toBeLessThan(5000)
    } finally {
      await draining.stop()
    }
  })
})
