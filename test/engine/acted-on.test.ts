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

async function row(key: string) {
  const { rows } = await db.pool.query<{ status: string; claim_id: string; interrupted: boolean }>(
    `SELECT status, claim_id::text, interrupted FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

const input = (key: string) => ({ scope: 'u1', key, fingerprint: 'step-worker' })

describe('a claim that may have been acted on is never deleted (issue 8, path 1; Invariant 11)', () => {
  it('a worker killed inside its first step, then a retry failing before its own first step: the next retry reuses the same provider key', async () => {
    const dead = await killInsideStep(db, 'acted-1', 'at-least-once')
    await ageClaim(db, 'u1', 'acted-1')
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })

    // The retry takes the claim over and fails before any step of its own (a fraud check's 503).
    const failing = engine.run(input('acted-1'), async () => {
      throw new Error('fraud check unavailable')
    })
    await expect(failing).rejects.toThrow('fraud check unavailable')
    // Not released: suspended, with the same identity.
    expect(await row('acted-1')).toEqual({ status: 'in_progress', claim_id: dead.claimId, interrupted: true })

    const retry = await engine.run(input('acted-1'), async (execution) => {
      expect(execution.how).toBe('take-over')
      await execution.step('charge', async ({ providerKey }) => {
        await db.pool.query('INSERT INTO provider_calls (provider_key, step) VALUES ($1, $2)', [providerKey, 'charge'])
      })
      return jsonResponse(201, '{}')
    })
    expect(retry.kind).toBe('executed')
    // Two calls reached the provider, both with one key: it dedupes them into one charge.
    const { rows } = await db.pool.query<{ provider_key: string }>(`SELECT DISTINCT provider_key FROM provider_calls WHERE step = 'charge'`)
    expect(rows).toEqual([{ provider_key: dead.providerKey }])
  })

  it('release() after a take-over suspends instead, and so does release() after a suspension', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const first = await engine.begin(input('acted-2'))
    if (first.kind !== 'execute') throw new Error(first.kind)
    expect(first.execution.sideEffectsPossible).toBe(false)
    await ageClaim(db, 'u1', 'acted-2')
    const taker = await engine.begin(input('acted-2'))
    if (taker.kind !== 'execute') throw new Error(taker.kind)
    expect(taker.execution.sideEffectsPossible).toBe(true)
    await taker.execution.release()
    expect(taker.execution.state).toBe('suspended')
    expect((await row('acted-2'))?.status).toBe('in_progress')

    // The mark is on the row: every later owner sees it, however many take-overs later.
    const next = await engine.begin(input('acted-2'))
    if (next.kind !== 'execute') throw new Error(next.kind)
    expect(next.execution.sideEffectsPossible).toBe(true)
    await next.execution.release()
    expect(await row('acted-2')).toMatchObject({ status: 'in_progress', interrupted: true })
  })

  it('a claim nobody can have acted on is still released', async () => {
    const { engine } = engineOn(db)
    const fresh = await engine.begin(input('acted-3'))
    if (fresh.kind !== 'execute') throw new Error(fresh.kind)
    await fresh.execution.release()
    expect(fresh.execution.state).toBe('released')
    expect(await row('acted-3')).toBeUndefined()
  })
})
