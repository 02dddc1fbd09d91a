import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { pruneInbox } from '../../src/outbox/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// Issue 24: pruneInbox deletes the inbox rows older than its window, in batches, and keeps the
// rest, so a duplicate of a recent event is still recognised (Invariant 13).

const HOUR_MS = 3_600_000

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const inboxTable = () => `"${db.schema.replaceAll('"', '""')}".inbox`

describe('pruneInbox', () => {
  it('deletes the rows older than olderThanMs across several batches, and keeps the younger ones', async () => {
    const table = inboxTable()
    await db.pool.query(`DELETE FROM ${table}`)
    // Five rows two hours old, two half an hour old, one just processed.
    await db.pool.query(
      `INSERT INTO ${table} (consumer, event_id, processed_at)
       SELECT 'c', 'old-' || n, now() - interval '2 hours' FROM generate_series(1, 5) AS n
       UNION ALL SELECT 'c', 'recent-' || n, now() - interval '30 minutes' FROM generate_series(1, 2) AS n
       UNION ALL SELECT 'c', 'new', now()`,
    )
    const lines: string[] = []
    const deleted = await pruneInbox({ pool: db.pool, schema: db.schema, olderThanMs: HOUR_MS, redeliveryHorizonMs: HOUR_MS, batchSize: 2, log: (line) => lines.push(line) })
    expect(deleted).toBe(5)
    const { rows } = await db.pool.query<{ event_id: string }>(`SELECT event_id FROM ${table} ORDER BY event_id`)
    expect(rows.map((row) => row.event_id)).toEqual(['new', 'recent-1', 'recent-2'])
    expect(lines).toEqual([])
    // Nothing is old enough now: a second prune deletes nothing.
    expect(await pruneInbox({ pool: db.pool, schema: db.schema, olderThanMs: HOUR_MS, redeliveryHorizonMs: HOUR_MS, log: (line) => lines.push(line) })).toBe(0)
  })
})
