import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { postgresKeyStore } from '../../src/client/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// What the PostgreSQL key store's setup creates, and the SQL it shows for a migration tool.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('postgresKeyStore setup', () => {
  it('creates the table and the partial index on expires_at that pruning reads', async () => {
    const store = postgresKeyStore(db.pool, { table: 'setup_keys' })
    await store.setup()
    const { rows } = await db.pool.query<{ indexname: string; indexdef: string }>(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'setup_keys' ORDER BY indexname`)
    expect(rows.map((row) => row.indexname)).toEqual(['setup_keys_expires_at', 'setup_keys_pkey'])
    expect(rows[0]?.indexdef).toMatch(/\(expires_at\) WHERE \(expires_at IS NOT NULL\)$/)
  })

  it('shows its SQL one column a line, the index last, as a migration file would hold it', () => {
    const { setupSql } = postgresKeyStore(db.pool, { table: 'shown_keys' })
    const lines = setupSql.split('\n')
    expect(lines[0]).toBe('CREATE TABLE IF NOT EXISTS "public"."shown_keys" (')
    expect(lines).toContain('  operation_id text PRIMARY KEY,')
    expect(lines).toContain('  expires_at timestamptz')
    expect(lines.at(-1)).toBe('CREATE INDEX IF NOT EXISTS "shown_keys_expires_at" ON "public"."shown_keys" (expires_at) WHERE expires_at IS NOT NULL;')
  })
})
