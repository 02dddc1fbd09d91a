import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import { createPostgresStore, migrate, type PoolLike, type QueryConfig } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { jsonResponse } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: {} })

/** A pool that records every query config it is given. */
function recordingPool(pool: pg.Pool): PoolLike & { configs: QueryConfig[] } {
  const configs: QueryConfig[] = []
  return {
    configs,
    query: async (config) => {
      configs.push(config)
      return pool.query(config) as never
    },
    connect: async () => pool.connect(),
  }
}

describe('prepared statements', () => {
  it('hot statements are named by default, and never named with preparedStatements: false', async () => {
    for (const preparedStatements of [true, false]) {
      const pool = recordingPool(db.pool)
      const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema, preparedStatements }) })
      const decision = await engine.begin({ scope: 'u1', key: `prepared-${preparedStatements}`, fingerprint })
      if (decision.kind !== 'execute') throw new Error(decision.kind)
      await decision.execution.complete(jsonResponse(201, '{}'))
      expect(await engine.begin({ scope: 'u1', key: `prepared-${preparedStatements}`, fingerprint })).toMatchObject({ kind: 'replay' })
      expect(pool.configs).toHaveLength(3)
      for (const config of pool.configs) {
        if (preparedStatements) expect(config.name).toMatch(/^oncely_[0-9a-f]{8}_/)
        else expect(config.name).toBeUndefined()
      }
    }
  })

  it('two stores with different schemas share one pool without their named statements colliding', async () => {
    await migrate({ pool: db.pool, schema: 'Second Schema' })
    // One connection, so both stores' prepared statements live on the same session.
    const single = new pg.Pool({ connectionString: db.url, max: 1 })
    try {
      const first = createEngine({ store: createPostgresStore({ pool: single, schema: db.schema }) })
      const second = createEngine({ store: createPostgresStore({ pool: single, schema: 'Second Schema' }) })
      for (const engine of [first, second, first, second]) {
        const decision = await engine.begin({ scope: 'u1', key: 'shared-pool', fingerprint })
        if (decision.kind === 'execute') await decision.execution.complete(jsonResponse(201, '{}'))
        else expect(decision.kind).toBe('replay')
      }
      const rows = await db.pool.query(`SELECT 1 FROM "Second Schema".idempotency_key WHERE key = 'shared-pool'`)
      expect(rows.rowCount).toBe(1)
    } finally {
      await single.end()
    }
  })
})

describe("the caller's own pg connection as the completion's transaction", () => {
  it('a pooled client and a plain pg.Client both fit as they are', async () => {
    await db.pool.query('CREATE TABLE IF NOT EXISTS pg_orders (id text PRIMARY KEY)')
    const engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }) })
    const pooled = await db.pool.connect()
    const plain = new pg.Client({ connectionString: db.url })
    await plain.connect()
    try {
      for (const [name, client] of [['pooled', pooled], ['plain', plain]] as const) {
        const decision = await engine.begin({ scope: 'u1', key: `own-${name}`, fingerprint })
        if (decision.kind !== 'execute') throw new Error(decision.kind)
        await client.query('BEGIN')
        await client.query('INSERT INTO pg_orders (id) VALUES ($1)', [name])
        await decision.execution.complete(jsonResponse(201, `{"order":"${name}"}`), { tx: client })
        await client.query('COMMIT')
        expect(await engine.begin({ scope: 'u1', key: `own-${name}`, fingerprint })).toMatchObject({ kind: 'replay' })
      }
      expect((await db.pool.query('SELECT id FROM pg_orders ORDER BY id')).rows).toEqual([{ id: 'plain' }, { id: 'pooled' }])
    } finally {
      pooled.release()
      await plain.end()
    }
  })
})
