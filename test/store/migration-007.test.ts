import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine } from '../../src/index.js'
import { checkSchema, createPostgresStore, loadMigrations, migrate, migrationStatus } from '../../src/store/postgres/index.js'
import { quoteIdentifier } from '../../src/store/postgres/quote-identifier.js'
import { CREATE_MIGRATIONS_TABLE, CREATE_SCHEMA, INSERT_APPLIED_MIGRATION } from '../../src/store/postgres/statements-migrate.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// Migration 007 renames the key table's columns to the engine's names (issue 24, point 5). A
// schema an older oncely made (migrations 001 to 006, rows written under the old names) must come
// through it with every row readable, plain or hash-partitioned, and be marked breaking so that
// an older process refuses it.
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

/** Lays out `schema` as oncely did before migration 007, as `migrate` would have recorded it. */
async function schemaBefore007(schema: string, partitions?: number): Promise<string> {
  const quoted = quoteIdentifier('schema', schema)
  await db.pool.query(CREATE_SCHEMA(quoted))
  await db.pool.query(CREATE_MIGRATIONS_TABLE(quoted))
  for (const migration of (await loadMigrations(schema, { partitions })).filter((m) => m.id < 7)) {
    await db.pool.query(migration.sql)
    await db.pool.query({ text: INSERT_APPLIED_MIGRATION(quoted), values: [migration.id, migration.name, migration.breaking] })
  }
  return quoted
}

/** A completed key, written with the column names of migrations 001 to 006. */
async function completedUnderOldNames(quoted: string, scope: string, key: string): Promise<void> {
  await db.pool.query({
    text: `INSERT INTO ${quoted}.idempotency_key (user_id, key, request_hash, status, claim_id, lock_token, phase_data, response_status, response_headers, response_body, expires_at)
           VALUES ($1, $2, 'v2:abc', 'completed', gen_random_uuid(), gen_random_uuid(), '{"charge":{"id":"ch_1"}}', 201, '[["content-type","application/json"]]', '{"id":"ch_1"}', now() + interval '1 day')`,
    values: [scope, key],
  })
}

const columns = async (schema: string) =>
  (await db.pool.query<{ column_name: string }>(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'idempotency_key' ORDER BY ordinal_position`, [schema])).rows.map(
    (row) => row.column_name,
  )

describe('migration 007: one name per concept', () => {
  it('renames user_id, request_hash, lock_token and phase_data, and the rows written before it are read as they were', async () => {
    const schema = 'before 007 plain'
    const quoted = await schemaBefore007(schema)
    await completedUnderOldNames(quoted, 'u1', 'k1')
    expect(await columns(schema)).toEqual(expect.arrayContaining(['user_id', 'request_hash', 'lock_token', 'phase_data']))

    const { applied } = await migrate({ pool: db.pool, schema })
    expect(applied.map((m) => m.name)).toEqual(['007_one_name_per_concept'])
    const after = await columns(schema)
    expect(after).toEqual(expect.arrayContaining(['scope', 'fingerprint', 'fence_token', 'step_results']))
    for (const old of ['user_id', 'request_hash', 'lock_token', 'phase_data']) expect(after).not.toContain(old)
    expect(await checkSchema({ pool: db.pool, schema })).toMatchObject({ ok: true, problems: [] })

    const engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema }) })
    const operation = await engine.inspect({ scope: 'u1', key: 'k1' })
    expect(operation).toMatchObject({ state: 'completed', steps: { charge: { id: 'ch_1' } }, response: { status: 201 } })
    expect(Buffer.from(operation?.response?.body ?? new Uint8Array()).toString()).toBe('{"id":"ch_1"}')
  })

  it('is marked breaking, so an oncely that does not ship it refuses the schema instead of failing statement by statement', async () => {
    const [migration] = (await loadMigrations()).filter((m) => m.id === 7)
    expect(migration).toMatchObject({ name: '007_one_name_per_concept', breaking: true })
    const schema = 'before 007 status'
    await schemaBefore007(schema)
    expect((await migrationStatus({ pool: db.pool, schema })).pending.map((m) => m.name)).toEqual(['007_one_name_per_concept'])
  })

  it('carries a schema hash-partitioned before it: the partition key follows the rename and migrate({ partitions }) accepts it', async () => {
    const schema = 'before 007 partitioned'
    const quoted = await schemaBefore007(schema, 4)
    for (let i = 0; i < 8; i++) await completedUnderOldNames(quoted, `u${i}`, 'k')
    const partitionKey = async () =>
      (await db.pool.query<{ key: string }>(`SELECT pg_get_partkeydef(c.oid) AS key FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'idempotency_key'`, [schema]))
        .rows[0]?.key
    expect(await partitionKey()).toBe('HASH (user_id)')

    // The layout check of `migrate({ partitions })` runs before 007: it must know the key by its old name.
    const { applied } = await migrate({ pool: db.pool, schema, partitions: 4 })
    expect(applied.map((m) => m.name)).toEqual(['007_one_name_per_concept'])
    expect(await partitionKey()).toBe('HASH (scope)')
    expect((await migrate({ pool: db.pool, schema, partitions: 4 })).applied).toEqual([])
    expect(await checkSchema({ pool: db.pool, schema })).toMatchObject({ ok: true, problems: [] })
    const engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema }) })
    for (let i = 0; i < 8; i++) expect(await engine.inspect({ scope: `u${i}`, key: 'k' })).toMatchObject({ state: 'completed' })
  })
})
