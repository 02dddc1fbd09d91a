import { randomUUID } from 'node:crypto'
import type pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine } from '../../src/index.js'
import { createPostgresStore, sqlState, type PoolLike } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { keyTable } from '../helpers/engine.js'

// Issue 24, point 6 (docs/scale-out.md): on a database that runs every transaction serializable
// (CockroachDB by default; PostgreSQL with default_transaction_isolation = serializable), two
// transactions on one key abort one of them with SQLSTATE 40001. The claim is safe to send again
// (it mints nothing the database keeps unless it commits), so the engine retries it and the
// caller gets the decision, not the error. A real 40001, from two real serializable transactions.

let db: TestDatabase
let serializable: pg.Pool
beforeAll(async () => {
  db = await createTestDatabase()
  serializable = db.newPool(2, { options: '-c default_transaction_isolation=serializable' })
})
afterAll(async () => {
  await db.close()
})

/** `pool`, with the SQLSTATE of every statement that failed on `pool.query` noted. */
function noting(pool: pg.Pool): PoolLike & { failures: string[] } {
  const failures: string[] = []
  const note = (error: unknown) => {
    failures.push(sqlState(error) ?? 'none')
    throw error
  }
  return {
    failures,
    query: (config) => (pool.query(config) as Promise<never>).catch(note),
    // The claim is sent on the pool itself; the store's own transactions are not under test here.
    connect: async () => pool.connect(),
  }
}

/** Resolves once a backend of the test database waits for a lock: the claim, behind the holder's row. */
async function someoneWaitsForALock(): Promise<void> {
  for (;;) {
    const { rows } = await db.pool.query<{ waiting: number }>(
      `SELECT count(*)::integer AS waiting FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND state = 'active'`,
    )
    if ((rows[0]?.waiting ?? 0) > 0) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

describe('SQLSTATE 40001 is retried where the statement is safe to retry', () => {
  it('a claim aborted by a serialization failure is sent again and answers the replay of the row that won', async () => {
    const pool = noting(serializable)
    const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }) })
    const body = '{"id":"ch_won"}'
    const holder = await db.pool.connect()
    try {
      await holder.query('BEGIN ISOLATION LEVEL SERIALIZABLE')
      await holder.query(
        `INSERT INTO ${keyTable(db)} (scope, key, fingerprint, status, claim_id, fence_token, response_status, response_headers, response_body, expires_at)
         VALUES ('u40001', 'k1', 'fp', 'completed', $1, $2, 201, '[["content-type","application/json"]]', $3, now() + interval '1 day')`,
        [randomUUID(), randomUUID(), Buffer.from(body)],
      )
      // The claim's INSERT waits for the holder's uncommitted row; when the holder commits, a row
      // its snapshot cannot see stands in its way: under SERIALIZABLE that is 40001.
      const decision = engine.begin({ scope: 'u40001', key: 'k1', fingerprint: 'fp' })
      await someoneWaitsForALock()
      await holder.query('COMMIT')
      const decided = await decision
      expect(pool.failures).toContain('40001')
      expect(decided.kind).toBe('replay')
      if (decided.kind === 'replay') expect(Buffer.from(decided.response.body).toString()).toBe(body)
    } finally {
      holder.release()
    }
  })
})
