import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { countingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// Issue 11: a step's result may ride with the claim's next write (`commit: 'with-next-write'`),
// saving a round trip and a commit; until then a take-over runs the step again with the same key.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })

async function row(key: string) {
  const { rows } = await db.pool.query<{ recovery_point: string | null; step_results: Record<string, unknown>; started_steps: string[] }>(
    `SELECT recovery_point, step_results, started_steps FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

describe("step(name, fn, { commit: 'with-next-write' })", () => {
  it("sends nothing itself; the next at-most-once mark carries it: the service's charge and receipt in one write", async () => {
    const pool = countingPool(db.pool)
    const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }) })
    const execution = owned(await engine.begin({ scope: 'u1', key: 'deferred-mark', fingerprint }))
    const charge = await execution.step('charge', () => ({ id: 'ch_1' }), { commit: 'with-next-write' })
    expect(charge).toEqual({ id: 'ch_1' })
    expect(pool.statements).toHaveLength(1)
    expect(execution.recoveryPoint).toBeNull()
    expect(await row('deferred-mark')).toMatchObject({ recovery_point: null, step_results: {} })

    await execution.step('receipt', () => true, { delivery: 'at-most-once', commit: 'with-next-write' })
    expect(pool.statements).toHaveLength(2)
    expect(await row('deferred-mark')).toMatchObject({ recovery_point: 'charge', step_results: { charge: { id: 'ch_1' } }, started_steps: ['receipt'] })
    expect(execution.recoveryPoint).toBe('charge')
    // A step already run returns its result without running, committed or not.
    expect(await execution.step('charge', () => ({ id: 'never' }))).toEqual({ id: 'ch_1' })
    await execution.complete(jsonResponse(201, '{}'))
    expect(pool.statements).toHaveLength(3)
  })

  it('the next committed step carries every deferred result, NUL characters included, in order', async () => {
    const { engine } = engineOn(db)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'deferred-phase', fingerprint }))
    await execution.step('a', () => ({ note: 'nul \u0000 inside' }), { commit: 'with-next-write' })
    await execution.step('b', () => 2, { commit: 'with-next-write' })
    await execution.step('c', () => 3)
    expect(execution.recoveryPoint).toBe('c')
    const stored = await row('deferred-phase')
    expect(stored?.recovery_point).toBe('c')
    expect(Object.keys(stored?.step_results ?? {}).sort()).toEqual(['a', 'b', 'c'])
    // A take-over resumes with all three, none run again.
    await ageClaim(db, 'u1', 'deferred-phase')
    const taker = owned(await engineOn(db, { staleAfterMs: 1000 }).engine.begin({ scope: 'u1', key: 'deferred-phase', fingerprint }))
    expect(taker.how).toBe('take-over')
    expect(await taker.step('a', () => ({ note: 'ran again' }))).toEqual({ note: 'nul \u0000 inside' })
    expect(await taker.step('b', () => -1)).toBe(2)
    await taker.complete(jsonResponse(201, '{}'))
  })

  it('an owner that dies before the next write: the take-over runs the step again with the same key', async () => {
    const { engine: slow } = engineOn(db, { staleAfterMs: 60_000 })
    const old = owned(await slow.begin({ scope: 'u1', key: 'deferred-crash', fingerprint }))
    const keys: string[] = []
    await old.step('charge', ({ providerKey }) => keys.push(providerKey), { commit: 'with-next-write' })
    await ageClaim(db, 'u1', 'deferred-crash')
    const taker = owned(await engineOn(db, { staleAfterMs: 1000 }).engine.begin({ scope: 'u1', key: 'deferred-crash', fingerprint }))
    expect(taker.how).toBe('take-over')
    expect(taker.recoveryPoint).toBeNull()
    await taker.step('charge', ({ providerKey }) => keys.push(providerKey))
    expect(keys).toHaveLength(2)
    expect(keys[1]).toBe(keys[0])
    // The old owner's deferred result cannot land: its next write is fenced out.
    await expect(old.step('receipt', () => true, { delivery: 'at-most-once' })).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    expect((await row('deferred-crash'))?.step_results).toEqual({ charge: 2 })
    await taker.complete(jsonResponse(201, '{}'))
  })

  it('refuses an unknown commit or delivery value before running the step', async () => {
    const { engine } = engineOn(db)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'deferred-options', fingerprint }))
    let ran = false
    const run = () => (ran = true)
    await expect(execution.step('x', run, { commit: 'later' as never })).rejects.toThrow(/option commit must be 'now' or 'with-next-write'; got "later"/)
    await expect(execution.step('x', run, { delivery: 'exactly-once' as never })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    expect(ran).toBe(false)
    await execution.release()
  })
})
