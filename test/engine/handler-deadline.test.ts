import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 6 } })

describe('a hung handler (issue 8, path 13)', () => {
  it('past handlerDeadlineMs the owner stops renewing and abandons its outcome; the claim goes stale and a retry resumes it', async () => {
    const timing = { staleAfterMs: 1000, leaseRenewMs: 100, handlerDeadlineMs: 400, ttlMs: 60_000 }
    const { engine, store } = engineOn(db, timing)
    const decision = await engine.begin({ scope: 'u1', key: 'hung-1', fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    const { execution } = decision
    await execution.step('reserve', async () => ({ id: 'r_1' }))
    const hung = deferred()
    // The handler hangs inside its charge, past the deadline.
    const charging = execution.step('charge', async () => {
      await hung.promise
      return { id: 'ch_late' }
    })
    // Counted by age since creation even while the lease stays fresh.
    await db.pool.query(`UPDATE ${keyTable(db)} SET created_at = now() - interval '1 hour' WHERE key = 'hung-1'`)
    expect(await store.countClaimsOlderThan(30 * 60_000)).toBeGreaterThanOrEqual(1)

    let taker
    for (let attempt = 0; attempt < 60 && taker === undefined; attempt++) {
      const retry = await engine.begin({ scope: 'u1', key: 'hung-1', fingerprint })
      if (retry.kind === 'execute') taker = retry.execution
      else await new Promise((resolve) => setTimeout(resolve, 100))
    }
    expect(execution.state).toBe('lost')
    expect(taker?.how).toBe('take-over')
    expect(taker?.recoveryPoint).toBe('reserve')
    // The hung step returns at last: its result is abandoned, never written.
    hung.resolve()
    await expect(charging).rejects.toMatchObject({ code: 'ONCELY_HANDLER_DEADLINE_EXCEEDED' })
    await expect(execution.complete(jsonResponse(201, '{}'))).rejects.toMatchObject({ code: 'ONCELY_HANDLER_DEADLINE_EXCEEDED' })
    await taker?.complete(jsonResponse(201, '{"by":"taker"}'))
  })
})
