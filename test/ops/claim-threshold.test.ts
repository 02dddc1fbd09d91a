import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { reconcileStuckClaims } from '../../src/ops/reconciler.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// Issue 22, point 3: the stale threshold a claim was made under is recorded with it. A process run
// with a smaller one (`oncely reconcile --stale-after-ms 1000 --older-than-ms 1000` beside a
// service on 60 s, or an engine configured lower) took over live claims whose owner renews on the
// 60 s schedule. It must wait for the claim's own threshold.
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 24 } })
const quiet = { info() {}, warn() {}, error() {} }

/** A live claim of a service whose threshold is 60 s, its lease last renewed `ageSeconds` ago (before its next renewal at 20 s). */
async function liveClaim(scope: string, key: string, ageSeconds: number) {
  const { engine } = engineOn(db, { staleAfterMs: 60_000 })
  const owner = owned(await engine.begin({ scope, key, fingerprint }))
  await db.pool.query(`UPDATE ${keyTable(db)} SET locked_at = now() - $3::integer * interval '1 second' WHERE scope = $1 AND key = $2`, [scope, key, ageSeconds])
  return owner
}

describe('a claim is taken over only past the stale threshold it was made under', () => {
  it('the reconciler run with a smaller threshold leaves a live claim to its owner, which completes it', async () => {
    const owner = await liveClaim('thr-1', 'live', 5)
    const { engine } = engineOn(db, { staleAfterMs: 1000 })
    const reports = await reconcileStuckClaims({ engine, database: { pool: db.pool, schema: db.schema }, hook: async () => {}, olderThanMs: 1000, log: quiet })
    expect(reports.filter((report) => report.scope === 'thr-1')).toEqual([])
    await owner.complete(jsonResponse(201, '{}'))
    expect(owner.state).toBe('completed')
  })

  it('an engine with a smaller threshold answers 409, not a take-over', async () => {
    const owner = await liveClaim('thr-2', 'live', 5)
    const { engine, store } = engineOn(db, { staleAfterMs: 1000 })
    const decision = await engine.begin({ scope: 'thr-2', key: 'live', fingerprint })
    expect(decision.kind).toBe('conflict')
    // The store's compare-and-swap refuses it too, whoever asks.
    const seen = await store.read('thr-2', 'live')
    expect(await store.takeOver(seen!, { fenceToken: crypto.randomUUID(), staleAfterMs: 1000, ttlMs: 86_400_000 })).toBeNull()
    await owner.complete(jsonResponse(201, '{}'))
    expect(owner.state).toBe('completed')
  })

  it('past the claim’s own threshold, the reconciler with a smaller one does take it over', async () => {
    await liveClaim('thr-3', 'dead', 61)
    const { engine } = engineOn(db, { staleAfterMs: 1000 })
    const reports = await reconcileStuckClaims({ engine, database: { pool: db.pool, schema: db.schema }, hook: async () => {}, olderThanMs: 1000, log: quiet })
    expect(reports.filter((report) => report.scope === 'thr-3')).toMatchObject([{ key: 'dead', decision: 'unresolved' }])
  })
})
