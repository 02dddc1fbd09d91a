import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { checkSchema, loadMigrations, migrationSql } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// checkSchema when the expected schema cannot be built, and the text of `oncely migrate --dry-run`.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('checkSchema', () => {
  it("rejects with the database's own error when the expected schema cannot be built (a role that may not create a schema)", async () => {
    const role = `oncely_no_create_${randomBytes(4).toString('hex')}`
    await db.pool.query(`CREATE ROLE ${role} NOLOGIN`)
    try {
      // The role reads the catalog but has no CREATE on the database, so the scratch schema fails.
      const pool = new pg.Pool({ connectionString: db.url, max: 1, options: `-c role=${role}` })
      try {
        const error: unknown = await checkSchema({ pool, schema: db.schema }).catch((caught: unknown) => caught)
        expect(error).toMatchObject({ code: '42501', message: expect.stringContaining('permission denied') as unknown })
      } finally {
        await pool.end()
      }
    } finally {
      await db.pool.query(`DROP ROLE ${role}`)
    }
  })
})

describe('migrationSql (oncely migrate --dry-run)', () => {
  it('prints CREATE SCHEMA, then each migration under its name, trimmed, one blank line between sections', async () => {
    const schema = 'dry run'
    const text = await migrationSql(schema)
    const migrations = await loadMigrations(schema)
    expect(text.startsWith('CREATE SCHEMA IF NOT EXISTS "dry run";\n\n')).toBe(true)
    for (const migration of migrations) expect(text).toContain(`\n\n-- ${migration.name}\n${migration.sql.trim()}\n`)
    expect(text).not.toMatch(/\n\n\n/)
    expect(text.endsWith(`${migrations.at(-1)!.sql.trim()}\n`)).toBe(true)
  })
})
