import { afterAll, beforeAll, expect, it } from 'vitest'
import { beginOf, transaction, withTransaction } from '../../src/store/postgres/statement-runner.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { countSocketWrites } from '../helpers/socket-writes.js'

// Issue 21: on a pipelining connection BEGIN is not awaited, and it now leaves in the same socket
// write as the statements the work sends before its first await (a system call saved per
// transaction: the relay's claim, a user's `withTransaction`). Corking must never hold back a
// statement: a work that awaits first, or fails, still gets BEGIN and ROLLBACK sent.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE ledger (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

const insert = (id: string) => ({ text: 'INSERT INTO ledger (id) VALUES ($1)', values: [id] })
const present = async (id: string) => (await db.pool.query('SELECT 1 FROM ledger WHERE id = $1', [id])).rowCount

for (const [runner, run] of [
  ['withTransaction', (pool: Parameters<typeof withTransaction>[0], work: Parameters<typeof withTransaction>[1]) => withTransaction(pool, work)],
  ["the store's transaction", (pool: Parameters<typeof withTransaction>[0], work: Parameters<typeof withTransaction>[1]) => transaction(pool, beginOf(['BEGIN']), 5000, work)],
] as const) {
  it(`${runner}: BEGIN and the first statements leave in one write, COMMIT in the next`, async () => {
    const pool = db.newPool(1, { pipeline: true })
    const counted = await countSocketWrites(pool)
    await run(pool, async (tx) => {
      await Promise.all([tx.query(insert(`${runner}-a`)), tx.query(insert(`${runner}-b`))])
    })
    expect(counted.writes).toBe(2)
    expect([await present(`${runner}-a`), await present(`${runner}-b`)]).toEqual([1, 1])
  })

  it(`${runner}: a work that awaits before its first statement still has BEGIN sent, and commits`, async () => {
    const pool = db.newPool(1, { pipeline: true })
    const counted = await countSocketWrites(pool)
    await run(pool, async (tx) => {
      await new Promise((resolve) => setTimeout(resolve, 20))
      await tx.query(insert(`${runner}-later`))
    })
    // BEGIN alone, then the statement, then COMMIT.
    expect(counted.writes).toBe(3)
    expect(await present(`${runner}-later`)).toBe(1)
  })

  it(`${runner}: a work that throws at once rolls back, and the connection serves the next transaction`, async () => {
    const pool = db.newPool(1, { pipeline: true })
    const thrown = new Error('refused before any statement')
    await expect(
      run(pool, (tx) => {
        void tx.query(insert(`${runner}-never`)).catch(() => undefined)
        throw thrown
      }),
    ).rejects.toBe(thrown)
    expect(await present(`${runner}-never`)).toBe(0)
    await run(pool, async (tx) => {
      await tx.query(insert(`${runner}-after`))
    })
    expect(await present(`${runner}-after`)).toBe(1)
  })
}
