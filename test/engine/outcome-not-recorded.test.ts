import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest, isOncelyError } from '../../src/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE charges (id text PRIMARY KEY)')
  await db.pool.query(`INSERT INTO charges (id) VALUES ('ch_taken')`)
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 4 } })

async function row(key: string) {
  const { rows } = await db.pool.query<{ status: string; fence_token: string | null; outcome_error: string | null; recovery_point: string | null }>(
    `SELECT status, fence_token::text, outcome_error, recovery_point FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

const insertCharge = (id: string) => async (tx: { query: (config: { text: string; values: unknown[] }) => Promise<unknown> }) => {
  await tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] })
  return { response: jsonResponse(201, `{"id":"${id}"}`), value: id }
}

describe('a completion that fails the same way every time (issue 8, path 15)', () => {
  it('after a step: the claim is kept suspended with the error recorded, ONCELY_OUTCOME_NOT_RECORDED is thrown, and a retry after the fix resumes from the step', async () => {
    const { engine, store } = engineOn(db, { staleAfterMs: 60_000 })
    const decision = await engine.begin({ scope: 'u1', key: 'dup-1', fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    const { execution } = decision
    await execution.step('charge', async () => ({ id: 'ch_taken' }))
    let runs = 0
    const error: unknown = await execution
      .completeInTransaction(async (tx) => {
        runs++
        return insertCharge('ch_taken')(tx)
      })
      .catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_OUTCOME_NOT_RECORDED')).toBe(true)
    expect((error as Error).cause).toMatchObject({ code: '23505' })
    // A deterministic error is not retried.
    expect(runs).toBe(1)
    expect(execution.state).toBe('suspended')
    expect(await row('dup-1')).toMatchObject({ status: 'in_progress', fence_token: null, recovery_point: 'charge', outcome_error: expect.stringContaining('23505') as unknown })
    // Listed as stuck for the operator once past the stale threshold (a suspended claim keeps its lease time).
    await db.pool.query(`UPDATE ${keyTable(db)} SET locked_at = now() - interval '2 minutes' WHERE key = 'dup-1'`)
    expect(await store.countStaleClaims(60_000)).toBeGreaterThanOrEqual(1)

    // The operator fixes the cause; the retry resumes after the stored step.
    const retry = await engine.begin({ scope: 'u1', key: 'dup-1', fingerprint })
    if (retry.kind !== 'execute') throw new Error(retry.kind)
    expect(retry.execution.recoveryPoint).toBe('charge')
    let charged = false
    await retry.execution.step('charge', async () => {
      charged = true
      return { id: 'ch_again' }
    })
    expect(charged).toBe(false)
    await retry.execution.completeInTransaction(insertCharge('ch_fixed'))
    expect(await row('dup-1')).toMatchObject({ status: 'completed', outcome_error: null })
  })

  it('before any step: the claim is released (nothing happened) and ONCELY_OUTCOME_NOT_RECORDED is thrown', async () => {
    const { engine } = engineOn(db)
    const decision = await engine.begin({ scope: 'u1', key: 'dup-2', fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    const error: unknown = await decision.execution.completeInTransaction(insertCharge('ch_taken')).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_OUTCOME_NOT_RECORDED')).toBe(true)
    expect(decision.execution.state).toBe('released')
    expect(await row('dup-2')).toBeUndefined()
  })

  it('an error thrown by the caller’s own code in work counts as deterministic too', async () => {
    const { engine } = engineOn(db)
    const decision = await engine.begin({ scope: 'u1', key: 'dup-3', fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    await decision.execution.step('charge', async () => ({ id: 'ch_3' }))
    const error: unknown = await decision.execution
      .completeInTransaction(async () => {
        throw new TypeError('receipt template missing')
      })
      .catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_OUTCOME_NOT_RECORDED')).toBe(true)
    expect(await row('dup-3')).toMatchObject({ status: 'in_progress', outcome_error: 'receipt template missing' })
  })
})
