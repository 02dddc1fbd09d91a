import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isOncelyError } from '../../src/errors.js'
import { loadMigrations, migrate, type MigrateOptions } from '../../src/store/postgres/index.js'
import { LOCK_MIGRATIONS } from '../../src/store/postgres/statements-migrate.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

/** A migrator stuck inside its transaction: it holds the schema's migration lock until `release()`. */
async function holdMigrationLock(schema: string): Promise<{ release(): Promise<void> }> {
  const client = await db.pool.connect()
  await client.query('BEGIN')
  await client.query({ text: LOCK_MIGRATIONS, values: [schema] })
  return {
    async release() {
      await client.query('ROLLBACK')
      client.release()
    },
  }
}

/** Waits until `count` sessions wait on an advisory lock: the migrators have reached the lock. */
async function waitForLockWaiters(count: number): Promise<void> {
  for (;;) {
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
    if ((rows[0]?.n ?? 0) >= count) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

describe('migrate: the lock', () => {
  it('twenty processes starting while a migrator holds the lock past their lock_timeout all succeed once it lets go', async () => {
    const schema = 'Busy Schema'
    const holder = await holdMigrationLock(schema)
    const pools = Array.from({ length: 20 }, () => db.newPool(1))
    const results = Promise.all(pools.map((pool) => migrate({ pool, schema, lockTimeoutMs: 100, timeoutMs: 30_000 })))
    await waitForLockWaiters(1)
    // Held well past lockTimeoutMs: every waiter's lock_timeout fires at least once and it retries.
    // The server's own timer decides; without the retry every migrator fails with 55P03 here.
    await new Promise((resolve) => setTimeout(resolve, 500))
    await holder.release()
    const done = await results
    // Each shipped migration was applied by exactly one of the twenty.
    const names = done.flatMap((result) => result.applied.map((migration) => migration.name))
    expect(new Set(names).size).toBe(names.length)
    expect(names.sort()).toEqual((await loadMigrations(schema)).map((migration) => migration.name).sort())
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "Busy Schema".migrations`)
    expect(rows[0]?.n).toBeGreaterThan(0)
  })

  it('a migrator stuck past the deadline fails with ONCELY_MIGRATION_LOCKED instead of waiting forever', async () => {
    const holder = await holdMigrationLock('Stuck Schema')
    try {
      const error: unknown = await migrate({ pool: db.pool, schema: 'Stuck Schema', lockTimeoutMs: 50, timeoutMs: 400 }).catch((e: unknown) => e)
      expect(isOncelyError(error, 'ONCELY_MIGRATION_LOCKED'), String(error)).toBe(true)
      // The lock wait that ran out is kept as the cause, for whoever reads the error.
      expect((error as Error).cause).toMatchObject({ code: '55P03' })
    } finally {
      await holder.release()
    }
  })
})

describe('migrate: a table a migration alters', () => {
  it('held by a long transaction past lockTimeoutMs: the migration waits and retries, then applies', async () => {
    const schema = 'Busy Table'
    await migrate({ pool: db.pool, schema })
    // 002 pending again: its columns dropped and its row removed, the rest of the schema current.
    await db.pool.query(`ALTER TABLE "Busy Table".idempotency_key DROP COLUMN interrupted, DROP COLUMN started_steps, DROP COLUMN outcome_error`)
    await db.pool.query(`DELETE FROM "Busy Table".migrations WHERE name = '002_claim_history'`)
    const reader = await db.pool.connect()
    await reader.query('BEGIN')
    await reader.query(`LOCK TABLE "Busy Table".idempotency_key IN ACCESS SHARE MODE`)
    const result = migrate({ pool: db.pool, schema, lockTimeoutMs: 100, timeoutMs: 30_000 })
    // Held well past lockTimeoutMs: the ALTER TABLE's lock wait fails with 55P03 at least once.
    await new Promise((resolve) => setTimeout(resolve, 500))
    await reader.query('ROLLBACK')
    reader.release()
    expect((await result).applied.map((migration) => migration.name)).toEqual(['002_claim_history'])
  })
})

describe('migrate: newer migrations', () => {
  it('runs alongside an additive migration a newer oncely applied, and names it', async () => {
    const schema = 'Additive Future'
    await migrate({ pool: db.pool, schema })
    await db.pool.query(`INSERT INTO "Additive Future".migrations (id, name) VALUES (9001, '9001_future_column')`)
    const result = await migrate({ pool: db.pool, schema })
    expect(result.newer).toEqual([{ id: 9001, name: '9001_future_column' }])
  })

  it('stops at a breaking one with ONCELY_SCHEMA_TOO_NEW, naming every breaking one', async () => {
    const schema = 'Breaking Future'
    await migrate({ pool: db.pool, schema })
    await db.pool.query(`INSERT INTO "Breaking Future".migrations (id, name, breaking) VALUES (9002, '9002_drop_column', true), (9003, '9003_drop_table', true)`)
    const error: unknown = await migrate({ pool: db.pool, schema }).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_SCHEMA_TOO_NEW')).toBe(true)
    expect(String(error)).toContain('(9002_drop_column, 9003_drop_table)')
  })
})

describe('migrate: bad arguments', () => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['no options', undefined, /^option options /],
    ['no pool', {}, /^option pool /],
    ['a pool without connect()', { pool: { query: () => Promise.resolve({ rows: [], rowCount: 0 }) } }, /^option pool /],
    ['an empty schema', { schema: '' }, /^option schema /],
    ['a zero lockTimeoutMs', { lockTimeoutMs: 0 }, /^option lockTimeoutMs /],
    ['a string timeoutMs', { timeoutMs: '5s' }, /^option timeoutMs /],
  ]
  for (const [name, options, message] of cases) {
    it(`${name}: ONCELY_INVALID_OPTION naming it, before any query`, async () => {
      const withPool = typeof options === 'object' && options !== null && !('pool' in options) && Object.keys(options).length > 0 ? { pool: db.pool, ...options } : options
      const error: unknown = await migrate(withPool as MigrateOptions).catch((e: unknown) => e)
      expect(isOncelyError(error, 'ONCELY_INVALID_OPTION'), String(error)).toBe(true)
      expect((error as Error).message).toMatch(message)
    })
  }
})
