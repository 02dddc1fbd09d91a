import { afterAll, beforeAll } from 'vitest'
import { createEngine } from '../../src/index.js'
import { createOutbox } from '../../src/outbox/index.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { countingPool } from './counting-pool.js'
import { createTestDatabase, type TestDatabase } from './db.js'
import { keyTable } from './engine.js'

/**
 * The completion tests' world: a database of the file's own with a `charges` table (created in
 * `beforeAll`, closed in `afterAll`), engines on counted pools, and the reads they assert on.
 */
export function useChargesDatabase() {
  let db: TestDatabase | undefined
  beforeAll(async () => {
    db = await createTestDatabase()
    await db.pool.query('CREATE TABLE charges (id text PRIMARY KEY)')
  })
  afterAll(async () => {
    await db?.close()
  })
  const database = () => {
    if (db === undefined) throw new Error('useChargesDatabase: the database exists only inside tests')
    return db
  }
  return {
    get db() {
      return database()
    },
    /** An engine on a counted pool of 4, pipelining or not, and an outbox without NOTIFY. */
    setup: (pipeline: boolean) => {
      const pool = countingPool(database().newPool(4, { pipeline }))
      const store = createPostgresStore({ pool, schema: database().schema })
      return { pool, engine: createEngine({ store }), outbox: createOutbox({ schema: database().schema, notify: false }) }
    },
    charges: async (id: string) => {
      const { rows } = await database().pool.query<{ n: number }>('SELECT count(*)::int AS n FROM charges WHERE id = $1', [id])
      return rows[0]!.n
    },
    /** The status of scope `u1`'s key, or undefined when it has no row. */
    status: async (key: string) => {
      const { rows } = await database().pool.query<{ status: string }>(`SELECT status FROM ${keyTable(database())} WHERE scope = 'u1' AND key = $1`, [key])
      return rows[0]?.status
    },
  }
}
