import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isOncelyError } from '../../src/errors.js'
import { checkSchema, loadMigrations, migrate, migrationStatus } from '../../src/store/postgres/index.js'
import { LOCK_MIGRATIONS } from '../../src/store/postgres/statements-migrate.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// migrationStatus, checkSchema and migrate's options and lock, in process: the CLI tests reach
// them only through child processes, which run unmutated code (issue 13).
let db: TestDatabase
let shipped: Array<{ id: number; name: string }>
beforeAll(async () => {
  db = await createTestDatabase()
  shipped = (await loadMigrations()).map(({ id, name }) => ({ id, name }))
})
afterAll(async () => {
  await db.close()
})

const codeOf = (error: unknown) => (error as { code?: string }).code

describe('migrationStatus', () => {
  it('a schema that does not exist lacks every shipped migration, in order', async () => {
    expect(shipped.length).toBeGreaterThan(1)
    expect(await migrationStatus({ pool: db.pool, schema: 'never migrated' })).toEqual({ pending: shipped, newer: [] })
  })

  it('a current schema lacks nothing and has nothing newer', async () => {
    expect(await migrationStatus({ pool: db.pool, schema: db.schema })).toEqual({ pending: [], newer: [] })
  })

  it('names the migration a schema lacks, and those a newer oncely applied with whether they are breaking', async () => {
    const schema = 'status partial'
    await migrate({ pool: db.pool, schema })
    const last = shipped[shipped.length - 1]!
    await db.pool.query(`DELETE FROM "status partial".migrations WHERE id = $1`, [last.id])
    await db.pool.query(`INSERT INTO "status partial".migrations (id, name, breaking) VALUES (901, '901_additive', false), (902, '902_breaking', true)`)
    expect(await migrationStatus({ pool: db.pool, schema })).toEqual({
      pending: [last],
      newer: [
        { id: 901, name: '901_additive', breaking: false },
        { id: 902, name: '902_breaking', breaking: true },
      ],
    })
  })

  it('reads a migrations table from before `breaking` existed, every row additive, without altering it', async () => {
    const schema = 'status old table'
    await migrate({ pool: db.pool, schema })
    await db.pool.query(`ALTER TABLE "status old table".migrations DROP COLUMN breaking`)
    await db.pool.query(`INSERT INTO "status old table".migrations (id, name) VALUES (903, '903_newer')`)
    expect(await migrationStatus({ pool: db.pool, schema })).toEqual({ pending: [], newer: [{ id: 903, name: '903_newer', breaking: false }] })
    const { rowCount } = await db.pool.query(`SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'migrations' AND column_name = 'breaking'`, [schema])
    expect(rowCount).toBe(0)
  })
})

describe('migrate', () => {
  it('runs alongside additive migrations of a newer oncely and names them', async () => {
    const schema = 'newer additive'
    await migrate({ pool: db.pool, schema })
    await db.pool.query(`INSERT INTO "newer additive".migrations (id, name, breaking) VALUES (904, '904_additive', false)`)
    expect(await migrate({ pool: db.pool, schema })).toEqual({ applied: [], newer: [{ id: 904, name: '904_additive' }] })
  })

  it('refuses options that are not an object, a pool without query and connect, and lock timeouts that are not whole positive milliseconds', async () => {
    const refusal = (options: unknown) => migrate(options as Parameters<typeof migrate>[0]).catch((error: unknown) => error)
    const nullError = await refusal(null)
    expect(codeOf(nullError)).toBe('ONCELY_INVALID_OPTION')
    expect((nullError as Error).message).toMatch(/got null/)
    expect((await refusal(undefined) as Error).message).toMatch(/got undefined/)
    for (const pool of [null, 'pool', { query() {} }, { connect() {} }]) {
      const error = await refusal({ pool })
      expect(codeOf(error)).toBe('ONCELY_INVALID_OPTION')
      expect((error as Error).message).toMatch(/^option pool must have query\(\) and connect\(\)/)
    }
    for (const lockTimeoutMs of [0, -1, 1.5, '100', Number.MAX_SAFE_INTEGER + 1]) {
      const error = await refusal({ pool: db.pool, schema: db.schema, lockTimeoutMs })
      expect(codeOf(error)).toBe('ONCELY_INVALID_OPTION')
      expect((error as Error).message).toMatch(/^option lockTimeoutMs must be a positive integer/)
    }
    expect((await refusal({ pool: db.pool, schema: db.schema, timeoutMs: 0 }) as Error).message).toMatch(/^option timeoutMs must be/)
    // One millisecond is the least accepted.
    expect(await migrate({ pool: db.pool, schema: db.schema, lockTimeoutMs: 1, timeoutMs: 1 })).toEqual({ applied: [], newer: [] })
  })

  it('a migration that fails is reported by name as ONCELY_MIGRATION_FAILED, and nothing of it is recorded', async () => {
    const schema = 'clashing table'
    await db.pool.query(`CREATE SCHEMA "clashing table"`)
    await db.pool.query(`CREATE TABLE "clashing table".idempotency_key (x int)`)
    const error = await migrate({ pool: db.pool, schema }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'ONCELY_MIGRATION_FAILED', message: expect.stringContaining(`migration ${shipped[0]!.name} failed: `) as unknown })
    expect(isOncelyError(error, 'ONCELY_MIGRATION_FAILED')).toBe(true)
    // The database's error is kept as the cause: the table already exists.
    expect((error as Error).cause).toMatchObject({ code: '42P07' })
    expect((await migrationStatus({ pool: db.pool, schema })).pending).toEqual(shipped)
  })

  it('waits for the migration lock, retrying past lockTimeoutMs, and throws ONCELY_MIGRATION_LOCKED once timeoutMs has passed', async () => {
    const schema = 'held lock'
    const holder = await db.pool.connect()
    try {
      await holder.query('BEGIN')
      await holder.query(LOCK_MIGRATIONS, [schema])
      const error = await migrate({ pool: db.pool, schema, lockTimeoutMs: 20, timeoutMs: 300 }).catch((e: unknown) => e)
      expect(isOncelyError(error, 'ONCELY_MIGRATION_LOCKED')).toBe(true)
      expect((error as Error).message).toContain('300 ms')
      // Held past several lock timeouts, then let go: the migrator retries and gets through.
      const migrating = migrate({ pool: db.pool, schema, lockTimeoutMs: 20, timeoutMs: 30_000 })
      await new Promise((resolve) => setTimeout(resolve, 200))
      await holder.query('COMMIT')
      expect((await migrating).applied.map(({ id }) => id)).toEqual(shipped.map(({ id }) => id))
    } finally {
      holder.release()
    }
  })
})

describe('checkSchema', () => {
  it('a schema that does not exist is one problem: run oncely migrate', async () => {
    expect(await checkSchema({ pool: db.pool, schema: 'not there' })).toEqual({
      schema: 'not there',
      ok: false,
      problems: [{ kind: 'missing-schema', detail: 'schema "not there" does not exist: run oncely migrate' }],
    })
  })

  it('a freshly migrated schema matches, and the scratch schema it compared with is gone', async () => {
    expect(await checkSchema({ pool: db.pool, schema: db.schema })).toEqual({ schema: db.schema, ok: true, problems: [] })
    const { rowCount } = await db.pool.query(`SELECT 1 FROM pg_namespace WHERE nspname LIKE 'oncely_doctor_%'`)
    expect(rowCount).toBe(0)
  })

  it('names a pending and an unknown migration, a missing, an unexpected and a different column, index and constraint', async () => {
    const schema = 'drifted'
    await migrate({ pool: db.pool, schema })
    const last = shipped[shipped.length - 1]!
    await db.pool.query(`DELETE FROM drifted.migrations WHERE id = $1`, [last.id])
    await db.pool.query(`INSERT INTO drifted.migrations (id, name) VALUES (905, '905_future')`)
    await db.pool.query(`ALTER TABLE drifted.idempotency_key DROP COLUMN recovery_point`)
    await db.pool.query(`ALTER TABLE drifted.idempotency_key ADD COLUMN extra text`)
    await db.pool.query(`ALTER TABLE drifted.idempotency_key ALTER COLUMN step_results DROP NOT NULL`)
    await db.pool.query(`DROP INDEX drifted.idempotency_key_expires_at`)
    await db.pool.query(`CREATE INDEX extra_index ON drifted.idempotency_key (extra)`)
    await db.pool.query(`ALTER TABLE drifted.idempotency_key DROP CONSTRAINT idempotency_key_final_has_response`)
    const report = await checkSchema({ pool: db.pool, schema })
    expect(report.ok).toBe(false)
    const details = report.problems.map(({ kind, detail }) => `${kind}: ${detail}`)
    expect(details).toEqual(
      expect.arrayContaining([
        `pending-migration: migration ${last.name} is not applied: run oncely migrate`,
        'unknown-migration: migration 905_future was applied by a newer oncely',
        expect.stringMatching(/^missing: column idempotency_key\.recovery_point is missing \(expected text null default none\)$/),
        expect.stringMatching(/^unexpected: column idempotency_key\.extra is not part of oncely's schema \(text null default none\)$/),
        "different: column idempotency_key.step_results is jsonb null default '{}'::jsonb, expected jsonb not null default '{}'::jsonb",
        expect.stringMatching(/^missing: index idempotency_key: idempotency_key_expires_at is missing \(expected CREATE INDEX/),
        expect.stringMatching(/^unexpected: index idempotency_key: extra_index is not part of oncely's schema \(CREATE INDEX/),
        expect.stringMatching(/^missing: constraint idempotency_key: idempotency_key_final_has_response is missing \(expected CHECK/),
      ]),
    )
    // PostgreSQL 18 keeps NOT NULL as a catalog constraint too: dropping it is then also named as
    // a missing constraint. Nothing else may be reported.
    const others = details.filter((detail) => !/^(pending-migration|unknown-migration): /.test(detail) && !/recovery_point|\.extra |extra_index|step_results|idempotency_key_expires_at|idempotency_key_final_has_response/.test(detail))
    expect(others).toEqual([])
    // Named when migration 001 made it, so after the 007 rename by the column's old name.
    const notNull = details.filter((detail) => /^missing: constraint idempotency_key: \S*(?:step_results|phase_data)\S*not_null\b/.test(detail))
    expect(details).toHaveLength(8 + notNull.length)
    expect(notNull.length).toBeLessThanOrEqual(1)
  })
})
