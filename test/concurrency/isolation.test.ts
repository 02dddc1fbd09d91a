import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { fingerprintRequest, type Decision } from '../../src/index.js'
import type { Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { jsonResponse, raceEngines } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 3 } })

function kinds(decisions: Decision<Queryable>[]): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const decision of decisions) counts[decision.kind] = (counts[decision.kind] ?? 0) + 1
  return counts
}

// Issue 8, path 8: the claim behaves the same under any default isolation level. Connections
// opened after the ALTER get the level; raceEngines opens new ones.
describe.each(['repeatable read', 'serializable'])('a database whose default isolation is %s', (level) => {
  it('20 concurrent duplicates: one executes, the others get 409 or its replay, none an error; the winner completes in a transaction', async () => {
    const { rows } = await db.pool.query<{ db: string }>('SELECT current_database() AS db')
    await db.pool.query(`ALTER DATABASE "${rows[0]?.db}" SET default_transaction_isolation = '${level}'`)
    onTestFinished(async () => {
      await db.pool.query(`ALTER DATABASE "${rows[0]?.db}" RESET default_transaction_isolation`)
    })
    const key = `iso-${level.replace(' ', '-')}`
    const race = await raceEngines(db, 20, { staleAfterMs: 3000, leaseRenewMs: 50 }, async (engine) => {
      const decision = await engine.begin({ scope: 'u1', key, fingerprint })
      if (decision.kind === 'execute') {
        // Lease renewals touch the row while the completion transaction runs (a write conflict
        // under these levels): the completion must still land.
        await decision.execution.step('charge', async () => {
          await new Promise((resolve) => setTimeout(resolve, 200))
          return { id: 'ch_iso' }
        })
        await decision.execution.completeInTransaction(async (tx) => {
          const level = await tx.query<{ level: string }>({ text: 'SHOW transaction_isolation' })
          await new Promise((resolve) => setTimeout(resolve, 120))
          return { response: jsonResponse(201, JSON.stringify(level.rows[0])), value: undefined }
        })
      }
      return decision
    })
    onTestFinished(() => race.close())
    // The others get 409 while it runs, or its replay once it completed; never an error.
    const counts = kinds(race.results)
    expect(counts.execute).toBe(1)
    expect((counts.conflict ?? 0) + (counts.replay ?? 0)).toBe(19)
  })
})
