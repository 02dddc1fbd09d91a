import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, keyTable } from '../helpers/engine.js'
import { killInsideStep } from './fixtures/kill-inside-step.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE provider_calls (n serial PRIMARY KEY, provider_key text NOT NULL, step text NOT NULL)')
})
afterAll(async () => {
  await db.close()
})

const input = (key: string) => ({ scope: 'u1', key, fingerprint: 'step-worker' })
const calls = async (step: string) => (await db.pool.query<{ provider_key: string }>(`SELECT provider_key FROM provider_calls WHERE step = $1`, [step])).rows

describe("an at-most-once step (issue 9; Invariant 13)", () => {
  it('a worker killed inside it: the take-over skips it, the send is never repeated', async () => {
    const dead = await killInsideStep(db, 'amo-1', 'at-most-once')
    await ageClaim(db, 'u1', 'amo-1')
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const decision = await engine.begin(input('amo-1'))
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    const { execution } = decision
    expect(execution.claimId).toBe(dead.claimId)
    let ran = false
    const receipt = await execution.step(
      'receipt',
      async () => {
        ran = true
        return { messageId: 'm_2' }
      },
      { delivery: 'at-most-once' },
    )
    expect({ ran, receipt }).toEqual({ ran: false, receipt: undefined })
    await execution.complete(jsonResponse(201, '{}'))
    expect(await calls('receipt')).toHaveLength(1)
  })

  it('recorded as started before its function runs; once it returns, its result is kept like any step', async () => {
    const { engine } = engineOn(db)
    const decision = await engine.begin(input('amo-2'))
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    const { execution } = decision
    const receipt = await execution.step(
      'receipt',
      async () => {
        const { rows } = await db.pool.query<{ started_steps: string[] }>(`SELECT started_steps FROM ${keyTable(db)} WHERE key = 'amo-2'`)
        expect(rows[0]?.started_steps).toEqual(['receipt'])
        return { messageId: 'm_1' }
      },
      { delivery: 'at-most-once' },
    )
    expect(receipt).toEqual({ messageId: 'm_1' })
    expect(execution.sideEffectsPossible).toBe(true)
    await execution.suspend()
    const resumed = await engine.begin(input('amo-2'))
    if (resumed.kind !== 'execute') throw new Error(resumed.kind)
    expect(await resumed.execution.step('receipt', async () => ({ messageId: 'm_again' }), { delivery: 'at-most-once' })).toEqual({ messageId: 'm_1' })
    await resumed.execution.complete(jsonResponse(201, '{}'))
  })
})
