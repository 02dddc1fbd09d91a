import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { migrate } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// A schema first migrated by an oncely from before the `breaking` column (issue 13: the column's
// ALTER ran in no test, so emptying it went unnoticed).

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('migrate on a migrations table without the breaking column', () => {
  it('adds the column (NOT NULL, default false), then applies and records every migration', async () => {
    const schema = 'Before Breaking'
    await db.pool.query(`CREATE SCHEMA "${schema}"`)
    await db.pool.query(`CREATE TABLE "${schema}".migrations (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
    const result = await migrate({ pool: db.pool, schema })
    expect(result.applied.length).toBeGreaterThan(0)
    const { rows } = await db.pool.query<{ column_name: string; is_nullable: string; column_default: string }>(
      `SELECT column_name, is_nullable, column_default FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'migrations' AND column_name = 'breaking'`,
      [schema],
    )
    expect(rows).toEqual([{ column_name: 'breaking', is_nullable: 'NO', column_default: 'false' }])
    const recorded = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".migrations`)
    expect(recorded.rows[0]!.n).toBe(result.applied.length)
  })
})
