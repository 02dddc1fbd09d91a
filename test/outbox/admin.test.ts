import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createOutbox, listEvents, outboxBacklog, pruneInbox, pruneSentEvents, retryDeadEvents } from '../../src/outbox/index.js'
import { migrate, withTransaction } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// The outbox's operations in process (issue 13: before, only the CLI's child-process tests ran
// them, which cannot kill a mutant): the backlog for metrics, re-queueing dead letters, pruning
// sent events. Each test works in a schema of its own, so the counts are its own.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

/** Events of `schema` in each state, `sent` ones sent `sentAgoMs` ago and `pending` ones waiting `pendingAgeMs`. */
async function eventsIn(schema: string, counts: { pending?: number; dead?: number; sent?: number }, ages: { sentAgoMs?: number; pendingAgeMs?: number } = {}) {
  const outbox = createOutbox({ schema })
  const ids: Record<'pending' | 'dead' | 'sent', string[]> = { pending: [], dead: [], sent: [] }
  await withTransaction(db.pool, async (tx) => {
    for (const status of ['pending', 'dead', 'sent'] as const) {
      for (let i = 0; i < (counts[status] ?? 0); i++) ids[status].push((await outbox.enqueue(tx, { type: `admin.${status}`, key: `k${i}`, payload: { i } })).id)
    }
  })
  const table = `"${schema.replaceAll('"', '""')}".outbox`
  await db.pool.query(`UPDATE ${table} SET status = 'dead', attempts = 7, last_error = 'broker refused' WHERE id = ANY($1::uuid[])`, [ids.dead])
  await db.pool.query(`UPDATE ${table} SET status = 'sent', sent_at = now() - make_interval(secs => $2::float8 / 1000) WHERE id = ANY($1::uuid[])`, [ids.sent, ages.sentAgoMs ?? 0])
  await db.pool.query(`UPDATE ${table} SET occurred_at = now() - make_interval(secs => $2::float8 / 1000), available_at = now() - make_interval(secs => $2::float8 / 1000) WHERE id = ANY($1::uuid[])`, [ids.pending, ages.pendingAgeMs ?? 0])
  return { ids, table }
}

async function schemaNamed(name: string): Promise<string> {
  await migrate({ pool: db.pool, schema: name })
  return name
}

describe('outboxBacklog', () => {
  it('counts the waiting and the dead events and the age of the oldest waiting one; an empty outbox is all zeros', async () => {
    const schema = await schemaNamed('admin backlog')
    expect(await outboxBacklog({ pool: db.pool, schema })).toEqual({ pending: 0, dead: 0, oldest_pending_age_seconds: 0 })
    await eventsIn(schema, { pending: 3, dead: 2, sent: 4 }, { pendingAgeMs: 90_000 })
    const backlog = await outboxBacklog({ pool: db.pool, schema })
    expect({ pending: backlog.pending, dead: backlog.dead }).toEqual({ pending: 3, dead: 2 })
    expect(backlog.oldest_pending_age_seconds).toBeGreaterThanOrEqual(90)
    expect(backlog.oldest_pending_age_seconds).toBeLessThan(150)
  })
})

describe('retryDeadEvents', () => {
  it('re-queues the dead events named, with a fresh attempt count; an id that is not dead is not re-queued', async () => {
    const schema = await schemaNamed('admin retry one')
    const { ids, table } = await eventsIn(schema, { pending: 1, dead: 2 })
    expect(await retryDeadEvents({ pool: db.pool, schema, ids: [ids.dead[0]!, ids.pending[0]!], inboxRetentionMs: 3_600_000 })).toEqual({ requeued: [ids.dead[0]], refused: [] })
    const { rows } = await db.pool.query<{ id: string; status: string; attempts: number; last_error: string | null }>(`SELECT id::text, status, attempts, last_error FROM ${table} ORDER BY seq`)
    expect(rows).toEqual([
      { id: ids.pending[0], status: 'pending', attempts: 0, last_error: null },
      { id: ids.dead[0], status: 'pending', attempts: 0, last_error: null },
      { id: ids.dead[1], status: 'dead', attempts: 7, last_error: 'broker refused' },
    ])
    expect((await listEvents({ pool: db.pool, schema, status: 'dead' })).map((event) => event.id)).toEqual([ids.dead[1]])
  })

  it("'all' re-queues every dead event and only those", async () => {
    const schema = await schemaNamed('admin retry all')
    const { ids } = await eventsIn(schema, { pending: 1, dead: 3, sent: 1 })
    const { requeued, refused } = await retryDeadEvents({ pool: db.pool, schema, ids: 'all', inboxRetentionMs: 3_600_000 })
    expect(requeued.sort()).toEqual([...ids.dead].sort())
    expect(refused).toEqual([])
    expect(await outboxBacklog({ pool: db.pool, schema })).toMatchObject({ pending: 4, dead: 0 })
  })
})

describe('retryDeadEvents after the inbox was pruned (issue 22)', () => {
  it('refuses a dead event older than inboxRetentionMs: a consumer applied it and its inbox row is gone, so it would be applied twice', async () => {
    const schema = await schemaNamed('admin retry pruned')
    const { ids, table } = await eventsIn(schema, { dead: 3 })
    const [old, young, known] = ids.dead as [string, string, string]
    // Two dead for two hours: their publish was confirmed too late, but a consumer applied them.
    await db.pool.query(`UPDATE ${table} SET created_at = now() - interval '2 hours' WHERE id = ANY($1::uuid[])`, [[old, known]])
    const inbox = createOutbox({ schema })
    const apply = (eventId: string) => withTransaction(db.pool, (tx) => inbox.consume(tx, { consumer: 'billing', eventId }, () => 'applied'))
    expect(await apply(old)).toEqual({ applied: true, value: 'applied' })
    await db.pool.query(`UPDATE "${schema.replaceAll('"', '""')}".inbox SET processed_at = now() - interval '90 minutes'`)
    expect(await pruneInbox({ pool: db.pool, schema, olderThanMs: 3_600_000, redeliveryHorizonMs: 0 })).toBe(1)
    // The row that remembered it is gone: delivered again, the event would be applied again.
    expect((await db.pool.query(`SELECT 1 FROM "${schema.replaceAll('"', '""')}".inbox`)).rowCount).toBe(0)

    expect(await retryDeadEvents({ pool: db.pool, schema, ids: [old, young], inboxRetentionMs: 3_600_000 })).toEqual({ requeued: [young], refused: [old] })
    expect((await listEvents({ pool: db.pool, schema, status: 'dead' })).map((event) => event.id)).toEqual([old, known])
    expect(await retryDeadEvents({ pool: db.pool, schema, ids: 'all', inboxRetentionMs: 3_600_000 })).toEqual({ requeued: [], refused: [old, known] })
    await expect(retryDeadEvents({ pool: db.pool, schema, ids: 'all' })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    expect(await retryDeadEvents({ pool: db.pool, schema, ids: [known], force: true })).toEqual({ requeued: [known], refused: [] })
    expect((await listEvents({ pool: db.pool, schema, status: 'dead' })).map((event) => event.id)).toEqual([old])
  })
})

describe('pruneSentEvents', () => {
  it('deletes the sent events older than the retention, batch after batch, and nothing else', async () => {
    const schema = await schemaNamed('admin prune')
    const old = await eventsIn(schema, { sent: 5 }, { sentAgoMs: 3_600_000 })
    const recent = await eventsIn(schema, { pending: 1, dead: 1, sent: 2 }, { sentAgoMs: 60_000 })
    expect(await pruneSentEvents({ pool: db.pool, schema, retentionMs: 600_000, batchSize: 2 })).toBe(5)
    const { rows } = await db.pool.query<{ id: string }>(`SELECT id::text FROM ${old.table}`)
    expect(rows.map((row) => row.id).sort()).toEqual([...recent.ids.pending, ...recent.ids.dead, ...recent.ids.sent].sort())
    expect(await pruneSentEvents({ pool: db.pool, schema, retentionMs: 600_000 })).toBe(0)
  })
})
