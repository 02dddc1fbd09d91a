import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createOutbox, createRelay, listEvents, outboxBacklog, pruneSentEvents } from '../../src/outbox/index.js'
import { withTransaction } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { runCli } from '../helpers/cli.js'
import { recordingPublisher } from './support/recording-publisher.js'
import { waitUntil } from './support/wait.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase({ max: 20 })
})
afterAll(async () => {
  await db.close()
})

const table = () => `"${db.schema.replaceAll('"', '""')}".outbox`
const write = (type: string, count: number, options: { notify?: boolean; key?: (n: number) => string | undefined } = {}) => {
  const outbox = createOutbox({ schema: db.schema, notify: options.notify ?? false })
  return withTransaction(db.pool, async (tx) => {
    const ids: string[] = []
    for (let n = 0; n < count; n++) {
      const key = options.key?.(n)
      ids.push((await outbox.enqueue(tx, { type, payload: { n }, ...(key === undefined ? {} : { key }) })).id)
    }
    return ids
  })
}

describe('publish failures', () => {
  it('back off per event, then dead-letter after maxAttempts; the CLI lists and re-queues it', async () => {
    const [id] = await write('behaviour.failing', 1)
    const publisher = recordingPublisher()
    publisher.failIds.add(id!)
    const relay = createRelay({ pool: db.pool, schema: db.schema, publisher, listen: false, maxAttempts: 3, backoffBaseMs: 60_000, log: () => undefined })
    expect(await relay.runOnce()).toMatchObject({ claimed: 1, failed: 1, dead: 0 })
    // In backoff: not claimed again before its time.
    expect(await relay.runOnce()).toMatchObject({ claimed: 0 })
    const { rows } = await db.pool.query<{ attempts: number; wait_s: number }>(`SELECT attempts, extract(epoch FROM available_at - now())::float8 AS wait_s FROM ${table()} WHERE id = $1`, [id])
    expect(rows[0]!.attempts).toBe(1)
    expect(rows[0]!.wait_s).toBeGreaterThan(25)
    for (const attempt of [2, 3]) {
      await db.pool.query(`UPDATE ${table()} SET available_at = now() WHERE id = $1`, [id])
      expect(await relay.runOnce()).toMatchObject({ failed: 1, dead: attempt === 3 ? 1 : 0 })
    }
    expect((await listEvents({ pool: db.pool, schema: db.schema, status: 'dead' })).map((event) => [event.id, event.attempts])).toEqual([[id, 3]])
    const env = { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema }
    const listed = await runCli(['outbox', 'list', '--dead'], env)
    expect(listed.stdout).toContain(id)
    expect(listed.stdout).toContain(`refused ${id!}`)
    const hour = ['--inbox-retention-ms', '3600000']
    expect((await runCli(['outbox', 'retry', '00000000-0000-7000-8000-000000000000', ...hour], env)).code).toBe(1)
    // Issue 22: the inbox retention is stated, or --force; one older than it is refused.
    expect((await runCli(['outbox', 'retry', id!], env)).code).toBe(2)
    await db.pool.query(`UPDATE ${table()} SET created_at = now() - interval '2 hours' WHERE id = $1`, [id])
    const refused = await runCli(['outbox', 'retry', id!, ...hour], env)
    expect(refused).toMatchObject({ code: 1, stdout: '' })
    expect(refused.stderr).toContain(`${id!} is older than --inbox-retention-ms`)
    expect((await listEvents({ pool: db.pool, schema: db.schema, status: 'dead' })).map((event) => event.id)).toEqual([id])
    const retried = await runCli(['outbox', 'retry', id!, '--force'], env)
    expect(retried).toMatchObject({ code: 0, stdout: `re-queued ${id!}\n` })
    publisher.failIds.delete(id!)
    expect(await relay.runOnce()).toMatchObject({ published: 1 })
    expect((await runCli(['outbox', 'retry'], env)).code).toBe(2)
  })
})

describe('backpressure', () => {
  it('never has more than maxInFlight publishes in flight', async () => {
    await write('behaviour.in-flight', 40, { key: (n) => `k${n}` })
    const gate = deferred()
    const publisher = recordingPublisher({ hold: () => gate.promise })
    const relay = createRelay({ pool: db.pool, schema: db.schema, publisher, listen: false, maxInFlight: 4 })
    const batch = relay.runOnce()
    await waitUntil('four publishes are in flight', () => publisher.maxInFlight() === 4)
    gate.resolve()
    await batch
    expect(publisher.maxInFlight()).toBe(4)
  })
})

describe('wake-up', () => {
  it('a NOTIFY wakes a listening relay long before its poll; it re-listens after its connection is killed', async () => {
    const publisher = recordingPublisher()
    const relay = createRelay({ pool: db.pool, schema: db.schema, publisher, pollIntervalMs: 600_000, log: () => undefined })
    await relay.start()
    try {
      await waitUntil('the relay listens', () => relay.listenConnections === 1)
      const before = publisher.messages.length
      await write('behaviour.notified', 1, { notify: true })
      await publisher.waitFor(before + 1)
      await db.pool.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND datname = current_database()`)
      await waitUntil('the relay listens again', () => relay.listenConnections === 2)
      await write('behaviour.notified', 1, { notify: true })
      await publisher.waitFor(before + 2)
    } finally {
      await relay.stop()
    }
  })

  it('with every notification lost, the poll still publishes', async () => {
    const publisher = recordingPublisher()
    const relay = createRelay({ pool: db.pool, schema: db.schema, publisher, listen: false, pollIntervalMs: 100 })
    await relay.start()
    try {
      await relay.runOnce()
      const before = publisher.messages.length
      await write('behaviour.polled', 3, { notify: false })
      await publisher.waitFor(before + 3)
    } finally {
      await relay.stop()
    }
  })
})

describe('retention and backlog', () => {
  it('prunes only sent events older than the window; the backlog counts what waits', async () => {
    await write('behaviour.prune', 3)
    await createRelay({ pool: db.pool, schema: db.schema, publisher: recordingPublisher(), listen: false }).runOnce()
    await write('behaviour.waiting', 2)
    await db.pool.query(`UPDATE ${table()} SET sent_at = now() - interval '2 days' WHERE type = 'behaviour.prune'`)
    expect(await pruneSentEvents({ pool: db.pool, schema: db.schema, retentionMs: 86_400_000 })).toBeGreaterThanOrEqual(3)
    expect((await db.pool.query(`SELECT 1 FROM ${table()} WHERE type = 'behaviour.prune'`)).rowCount).toBe(0)
    const backlog = await outboxBacklog({ pool: db.pool, schema: db.schema })
    expect(backlog.pending).toBeGreaterThanOrEqual(2)
  })
})

describe('options', () => {
  it('a bad option fails at creation, naming it', () => {
    const publisher = recordingPublisher()
    expect(() => createRelay({ pool: db.pool, publisher, leaseMs: 1000, publishTimeoutMs: 1000 })).toThrow(/publishTimeoutMs/)
    expect(() => createRelay({ pool: db.pool, publisher, maxInFlight: 0 })).toThrow(/maxInFlight/)
    expect(() => createRelay({ pool: db.pool, publisher: {} as never })).toThrow(/publisher/)
  })
})
