import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createOutbox, createRelay } from '../../src/outbox/index.js'
import { withTransaction } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { recordingPublisher } from './support/recording-publisher.js'

// Issue 21: a prepared statement keeps the plan PostgreSQL chose for it after its fifth run. The
// relay's claims and marks, planned while the outbox was small, kept a sequential scan of the
// whole table (a hash join for the followers) after it had grown: each batch then read every
// event ever kept (seen: 20 000 rows read to find 7; the relay's database CPU per event grew from
// 0.3 to 1.5 ms in 90 s of 600 events a second, on PostgreSQL 15 and 18). Planned at each run,
// the followers' claim, a join of the heads to every unsent event of their keys, still chose a
// sequential scan once a batch held many keys and the outbox had never been analysed: without
// statistics, `status <> 'sent'` is taken to hold for nearly every row. It now reads each key's
// first unsent events in order, under a LIMIT.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

/**
 * What every backend has reported so far of the scans of `table`: the rows its sequential scans
 * read, and how many index scans there were.
 */
async function scansOf(schema: string, table: string): Promise<{ seqRowsRead: number; indexScans: number }> {
  await db.pool.query('SELECT pg_stat_clear_snapshot()')
  const { rows } = await db.pool.query<{ seq: string | null; idx: string | null }>(
    'SELECT seq_tup_read::text AS seq, idx_scan::text AS idx FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2',
    [schema, table],
  )
  return { seqRowsRead: Number(rows[0]?.seq ?? 0), indexScans: Number(rows[0]?.idx ?? 0) }
}

describe('the relay on an outbox that grew after its statements were first run', () => {
  it('finds its events through the indexes, not by reading every kept event', async () => {
    const { schema } = db
    const outbox = createOutbox({ schema, notify: false })
    // One connection: the relay's statements are prepared, and their plans kept, on it.
    const relayPool = new pg.Pool({ connectionString: db.url, max: 1 })
    const publisher = recordingPublisher()
    const relay = createRelay({ pool: relayPool, schema, publisher, listen: false, batchSize: 500, log: () => {} })
    let before = { seqRowsRead: 0, indexScans: 0 }
    const enqueue = (n: number, key: string) => withTransaction(db.pool, (tx) => outbox.enqueue(tx, { type: 'plans.test', key, payload: { n } }))
    try {
      // Ten batches of a head and a follower each, on a nearly empty table: past the fifth run
      // PostgreSQL may keep a generic plan of each statement, made for a table this small.
      for (let batch = 0; batch < 10; batch++) {
        await enqueue(2 * batch, 'cus_plans')
        await enqueue(2 * batch + 1, 'cus_plans')
        expect((await relay.runOnce()).published).toBe(2)
      }
      // The outbox grows: a week of kept events, sent and spread over many keys.
      const kept = 30_000
      await db.pool.query(
        `INSERT INTO "${schema}".outbox (id, type, ordering_key, payload, headers, occurred_at, status, sent_at)
         SELECT gen_random_uuid(), 'plans.kept', 'cus_' || (i % 500), '{}', '{}', now(), 'sent', now() FROM generate_series(1, ${kept}) i`,
      )
      before = await scansOf(schema, 'outbox')
      // Batches of forty keys with three events each: forty heads, and behind each two followers.
      for (let batch = 0; batch < 5; batch++) {
        await Promise.all(Array.from({ length: 40 }, async (_, key) => {
          for (let n = 0; n < 3; n++) await enqueue(n, `cus_grown_${key}`)
        }))
        expect((await relay.runOnce()).published).toBe(120)
      }
    } finally {
      await relay.stop()
      await relayPool.end()
    }
    // A backend reports its counts when it ends: wait until the relay's has ended, then read them.
    for (let attempt = 0; attempt < 50; attempt++) {
      const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
      if (rows[0] !== undefined && rows[0].n <= db.pool.totalCount) break
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    let after = await scansOf(schema, 'outbox')
    for (let attempt = 0; attempt < 50 && after.indexScans === before.indexScans; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      after = await scansOf(schema, 'outbox')
    }
    // The relay's counts were reported: its batches' index scans are there.
    expect(after.indexScans).toBeGreaterThan(before.indexScans)
    // Five batches that scanned the table once each would read 150 000 rows; through the indexes
    // they read none of them (the first ten batches' scans of a table of at most twenty rows may
    // be reported late, inside this count).
    expect(after.seqRowsRead - before.seqRowsRead).toBeLessThan(1_000)
  })
})
