import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadMigrations, migrate, migrationSql } from '../../src/store/postgres/index.js'
import { isOncelyError } from '../../src/errors.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('loadMigrations', () => {
  it('lists the shipped files in order, named as the migrations table records them (no .sql), numbered by their prefix, 007 the first breaking one', async () => {
    const migrations = await loadMigrations('oncely')
    expect(migrations.map(({ id, name, breaking }) => ({ id, name, breaking }))).toEqual([
      { id: 1, name: '001_idempotency_key', breaking: false },
      { id: 2, name: '002_claim_history', breaking: false },
      { id: 3, name: '003_outbox', breaking: false },
      { id: 4, name: '004_claim_stale_threshold', breaking: false },
      { id: 5, name: '005_fence_lost_error', breaking: false },
      { id: 6, name: '006_claim_awaited', breaking: false },
      { id: 7, name: '007_one_name_per_concept', breaking: true },
    ])
  })
})

describe('migrate', () => {
  it('twenty concurrent migrations of a fresh schema end with one schema and no error', async () => {
    const schema = 'Fresh Schema'
    const pools = Array.from({ length: 20 }, () => db.newPool(1))
    const results = await Promise.all(pools.map((pool) => migrate({ pool, schema })))
    // Each migration runs in its own transaction under the lock, so one caller may apply 001–006
    // and another 007: what must hold is that every migration was applied by exactly one caller.
    const appliedIds = results.flatMap((result) => result.applied.map((migration) => migration.id)).sort((a, b) => a - b)
    expect(appliedIds).toEqual((await loadMigrations(schema)).map((migration) => migration.id))
    const { rows } = await db.pool.query<{ id: number }>(`SELECT id FROM "Fresh Schema".migrations ORDER BY id`)
    expect(rows.map((row) => row.id)).toEqual((await loadMigrations(schema)).map((migration) => migration.id))
    const tables = await db.pool.query(`SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'idempotency_key'`, [schema])
    expect(tables.rowCount).toBe(1)
  })

  it('is a no-op on a current schema', async () => {
    expect((await migrate({ pool: db.pool, schema: db.schema })).applied).toEqual([])
  })

  it('refuses a schema migrated by a newer oncely', async () => {
    const schema = 'from the future'
    await migrate({ pool: db.pool, schema })
    await db.pool.query(`INSERT INTO "from the future".migrations (id, name, breaking) VALUES (999, '999_future', true)`)
    const error: unknown = await migrate({ pool: db.pool, schema }).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_SCHEMA_TOO_NEW')).toBe(true)
  })

  it('creates a schema whose name holds the replacement patterns of String.replace ($&, $$, $`, $\')', async () => {
    // Each pattern, spliced in by a string replacement, would have put the matched text, or the
    // SQL around it, into the name: the schema would be another one, or the SQL broken.
    for (const schema of ['a$&b', "p$$q$`r$'s"]) {
      const { applied } = await migrate({ pool: db.pool, schema })
      expect(applied.map((migration) => migration.id)).toEqual((await loadMigrations(schema)).map((migration) => migration.id))
      const { rows } = await db.pool.query<{ table_schema: string }>(`SELECT DISTINCT table_schema FROM information_schema.tables WHERE table_name IN ('idempotency_key', 'migrations') AND table_schema = $1`, [schema])
      expect(rows).toEqual([{ table_schema: schema }])
      expect((await migrate({ pool: db.pool, schema })).applied).toEqual([])
    }
  })

  it('creates a schema named with 63 bytes of UTF-8 in full, and refuses 64 bytes in fewer characters before sending anything', async () => {
    // PostgreSQL would cut a longer name to 63 bytes (a NOTICE only), so two names would be one schema.
    const longest = `${'é'.repeat(31)}s`
    await migrate({ pool: db.pool, schema: longest })
    const { rows } = await db.pool.query<{ nspname: string }>(`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'ééé%'`)
    expect(rows).toEqual([{ nspname: longest }])
    const error: unknown = await migrate({ pool: db.pool, schema: 'é'.repeat(32) }).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_INVALID_OPTION')).toBe(true)
    expect((await db.pool.query(`SELECT 1 FROM pg_namespace WHERE nspname LIKE 'ééé%'`)).rowCount).toBe(1)
  })

  it('the dry-run SQL creates the same schema when run by hand', async () => {
    const sql = await migrationSql('Dry Run')
    expect(sql).toContain('CREATE TABLE "Dry Run".idempotency_key')
    const client = new pg.Client({ connectionString: db.url })
    await client.connect()
    await client.query(sql)
    const { rowCount } = await client.query(`SELECT 1 FROM information_schema.tables WHERE table_schema = 'Dry Run' AND table_name = 'idempotency_key'`)
    await client.end()
    expect(rowCount).toBe(1)
  })
})
