import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { sweepExpiredKeys } from '../../src/ops/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, keyTable } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 5 } })
const TTL = 3_600_000

async function expire(key: string) {
  await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 second' WHERE scope = 'u1' AND key = $1`, [key])
}

async function row(key: string) {
  const { rows } = await db.pool.query<{ claim_id: string; expires_in_s: number; status: string }>(
    `SELECT claim_id::text, EXTRACT(EPOCH FROM expires_at - now())::float8 AS expires_in_s, status FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

describe('a running claim is never re-identified (issue 8, paths 2 and 6; Invariant 11)', () => {
  it('past its TTL with a fresh lease: a conflict, not a new claim', async () => {
    const { engine } = engineOn(db, { ttlMs: TTL })
    const owner = await engine.begin({ scope: 'u1', key: 'ttl-live', fingerprint })
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    await owner.execution.step('charge', async () => ({ id: 'ch_1' }))
    await expire('ttl-live')
    expect((await engine.begin({ scope: 'u1', key: 'ttl-live', fingerprint })).kind).toBe('conflict')
    await owner.execution.complete(jsonResponse(201, '{}'))
  })

  it('past its TTL and stale: taken over with its identity (the same step keys), and its expiry pushed a TTL ahead', async () => {
    const { engine } = engineOn(db, { ttlMs: TTL })
    const dead = await engine.begin({ scope: 'u1', key: 'ttl-stale', fingerprint })
    if (dead.kind !== 'execute') throw new Error(dead.kind)
    await expire('ttl-stale')
    await ageClaim(db, 'u1', 'ttl-stale')
    const taker = await engine.begin({ scope: 'u1', key: 'ttl-stale', fingerprint })
    if (taker.kind !== 'execute') throw new Error(taker.kind)
    expect(taker.execution.how).toBe('take-over')
    expect(taker.execution.claimId).toBe(dead.execution.claimId)
    expect(taker.execution.stepKey('charge')).toBe(dead.execution.stepKey('charge'))
    // A concurrent retry must not see it expired before the first lease renewal.
    expect((await row('ttl-stale'))?.expires_in_s).toBeGreaterThan(TTL / 1000 - 60)
    expect((await engine.begin({ scope: 'u1', key: 'ttl-stale', fingerprint })).kind).toBe('conflict')
    await taker.execution.complete(jsonResponse(201, '{}'))
  })

  it('taken over near the end of its TTL: the take-over pushes the expiry, so a concurrent retry cannot reclaim it', async () => {
    const { engine } = engineOn(db, { ttlMs: TTL })
    const dead = await engine.begin({ scope: 'u1', key: 'ttl-edge', fingerprint })
    if (dead.kind !== 'execute') throw new Error(dead.kind)
    await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() + interval '200 milliseconds' WHERE key = 'ttl-edge'`)
    await ageClaim(db, 'u1', 'ttl-edge')
    const taker = await engine.begin({ scope: 'u1', key: 'ttl-edge', fingerprint })
    if (taker.kind !== 'execute') throw new Error(taker.kind)
    expect((await row('ttl-edge'))?.expires_in_s).toBeGreaterThan(TTL / 1000 - 60)
    await taker.execution.complete(jsonResponse(201, '{}'))
  })

  it('the sweeper deletes expired completed and failed keys, never a running claim, committed steps or not', async () => {
    const { engine, store } = engineOn(db, { ttlMs: TTL })
    const settle = async (key: string, how: 'complete' | 'fail' | 'run' | 'step') => {
      const decision = await engine.begin({ scope: 'u1', key, fingerprint })
      if (decision.kind !== 'execute') throw new Error(decision.kind)
      if (how === 'complete') await decision.execution.complete(jsonResponse(201, '{}'))
      if (how === 'fail') await decision.execution.fail(jsonResponse(402, '{}'))
      if (how === 'step') await decision.execution.step('charge', async () => ({ id: 'ch_9' }))
      await expire(key)
      return decision.execution
    }
    await settle('sweep-done', 'complete')
    await settle('sweep-failed', 'fail')
    const entered = await settle('sweep-entered', 'run')
    const stepped = await settle('sweep-stepped', 'step')
    await ageClaim(db, 'u1', 'sweep-stepped')
    expect((await sweepExpiredKeys(store)).deleted).toBeGreaterThanOrEqual(2)
    expect(await row('sweep-done')).toBeUndefined()
    expect(await row('sweep-failed')).toBeUndefined()
    expect(await row('sweep-entered')).toMatchObject({ status: 'in_progress' })
    expect(await row('sweep-stepped')).toMatchObject({ status: 'in_progress' })
    await entered.complete(jsonResponse(201, '{}'))
    expect(stepped.state).toBe('running')
  })
})
