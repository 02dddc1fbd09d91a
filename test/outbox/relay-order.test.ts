import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createOutbox, createRelay, listEvents, retryDeadEvents, type Relay } from '../../src/outbox/index.js'
import { withTransaction } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { recordingPublisher } from './support/recording-publisher.js'
import { waitUntil } from './support/wait.js'

let db: TestDatabase
let outbox: ReturnType<typeof createOutbox>
beforeAll(async () => {
  db = await createTestDatabase({ max: 30 })
  outbox = createOutbox({ schema: db.schema, notify: false })
})
afterAll(async () => {
  await db.close()
})

const payloadOf = (body: Buffer) => (JSON.parse(body.toString()) as { data: unknown }).data

describe('per-key order follows commit order', () => {
  it('an event written first but committed last is published last', async () => {
    const type = 'order.commit-order'
    const first = await db.pool.connect()
    const second = await db.pool.connect()
    const commits: string[] = []
    try {
      // `second` writes its event of key k first, and keeps its transaction open.
      await second.query('BEGIN')
      await outbox.enqueue(second, { type, key: 'k', payload: 'second' })
      await first.query('BEGIN')
      const firstPid = (await first.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid
      const firstWrite = outbox.enqueue(first, { type, key: 'k', payload: 'first' })
      // Either `first` waits for `second`'s key lock, or (without it) writes at once and could
      // commit before `second` with a later seq.
      const blocked = await Promise.race([
        firstWrite.then(() => false),
        waitUntil('the second writer waits on a lock', async () => (await db.pool.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = $2', [firstPid, 'Lock'])).rowCount === 1).then(() => true),
      ])
      const commit = async (name: string, client: typeof first) => {
        await client.query('COMMIT')
        commits.push(name)
      }
      if (blocked) {
        await commit('second', second)
        await firstWrite
        await commit('first', first)
      } else {
        await commit('first', first)
        await commit('second', second)
      }
    } finally {
      first.release()
      second.release()
    }
    const publisher = recordingPublisher()
    await createRelay({ pool: db.pool, schema: db.schema, publisher, listen: false }).runOnce()
    expect(publisher.messages.filter((m) => m.type === type).map((m) => payloadOf(m.body))).toEqual(commits)
  })
})

describe('two relays, 10 keys × 50 events, across a dead letter and its re-queue', () => {
  it('the consumer sees each key in order, and the dead event blocks its key until re-queued', async () => {
    const type = 'order.acceptance'
    const keys = Array.from({ length: 10 }, (_, k) => `cus_${k}`)
    // Ten writers at once, each committing its key's events one transaction at a time.
    const ids = new Map<string, string[]>()
    await Promise.all(
      keys.map(async (key) => {
        const written: string[] = []
        for (let n = 0; n < 50; n++) {
          written.push((await withTransaction(db.pool, (tx) => outbox.enqueue(tx, { type, key, payload: { key, n } }))).id)
        }
        ids.set(key, written)
      }),
    )
    const poisoned = ids.get('cus_3')![10]!
    const publisher = recordingPublisher()
    publisher.failIds.add(poisoned)
    const options = { pool: db.pool, schema: db.schema, publisher, pollIntervalMs: 20, batchSize: 37, maxInFlight: 4, maxAttempts: 2, backoffBaseMs: 1, backoffMaxMs: 5, log: () => undefined }
    const relays: Relay[] = [createRelay(options), createRelay(options)]
    await Promise.all(relays.map((relay) => relay.start()))
    try {
      await waitUntil('the poisoned event is dead', async () => (await listEvents({ pool: db.pool, schema: db.schema, status: 'dead' })).some((event) => event.id === poisoned))
      // Everything but key 3 from its 11th event on.
      await publisher.waitFor(500 - 40)
      expect(publisher.messages.filter((m) => m.key === 'cus_3').map((m) => (payloadOf(m.body) as { n: number }).n)).toEqual([...Array(10).keys()])
      publisher.failIds.delete(poisoned)
      expect(await retryDeadEvents({ pool: db.pool, schema: db.schema, ids: [poisoned], inboxRetentionMs: 3_600_000 })).toEqual({ requeued: [poisoned], refused: [] })
      await publisher.waitFor(500)
    } finally {
      await Promise.all(relays.map((relay) => relay.stop()))
    }
    const mine = publisher.messages.filter((m) => m.type === type)
    expect(new Set(mine.map((m) => m.id)).size).toBe(500)
    for (const key of keys) {
      expect(mine.filter((m) => m.key === key).map((m) => m.id), key).toEqual(ids.get(key))
    }
  })
})
