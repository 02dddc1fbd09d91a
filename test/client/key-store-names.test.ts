import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { postgresKeyStore } from '../../src/client/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// Issue 22 point 4: PostgreSQL keeps 63 bytes of a name and the key store names its index
// TABLE_expires_at, so the longest table is 52 bytes. Before, a 53- to 63-character table was
// refused as if the index's name were the table's, and a long non-ASCII name was accepted and
// cut by PostgreSQL, so two key stores could share one table.
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

function refusal(make: () => unknown): string {
  try {
    make()
  } catch (error) {
    expect(error).toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    return (error as Error).message
  }
  throw new Error('not refused')
}

describe('postgresKeyStore names', () => {
  it('takes a table of 52 bytes, and its index is named after it in full', async () => {
    const table = 't'.repeat(52)
    const store = postgresKeyStore(db.pool, { table })
    await store.setup()
    const { rows } = await db.pool.query<{ indexname: string }>({ text: `SELECT indexname FROM pg_indexes WHERE tablename = $1 AND indexname LIKE '%expires_at'`, values: [table] })
    expect(rows.map((row) => row.indexname)).toEqual([`${table}_expires_at`])
  })

  it.each([53, 60, 63])('refuses a table of %i characters naming the table, the limit and why', (length) => {
    const table = 'k'.repeat(length)
    const message = refusal(() => postgresKeyStore(db.pool, { table }))
    expect(message).toBe(`option table must be at most 52 bytes in UTF-8 (PostgreSQL keeps 63 bytes of a name, and the key store's index is named TABLE_expires_at); got "${table}" (${length} bytes)`)
  })

  it('refuses a non-ASCII table over 52 bytes that PostgreSQL would cut, where two stores would share one table', () => {
    // 40 Cyrillic letters, 80 bytes: PostgreSQL would keep the first 31, so both names would be
    // the same table (seen on today's code: the second store read the first one's key).
    const stem = 'ключи'.repeat(7) + 'ключ'
    for (const table of [`${stem}а`, `${stem}б`]) expect(refusal(() => postgresKeyStore(db.pool, { table }))).toContain('(80 bytes)')
  })

  it('refuses a non-ASCII schema over 63 bytes, which PostgreSQL would cut to another schema', () => {
    const schema = 'схема'.repeat(7) // 35 characters, 70 bytes
    expect(refusal(() => postgresKeyStore(db.pool, { schema }))).toBe(`option schema must be at most 63 bytes in UTF-8 (PostgreSQL keeps 63 bytes of a name); got "${schema}" (70 bytes)`)
  })
})
