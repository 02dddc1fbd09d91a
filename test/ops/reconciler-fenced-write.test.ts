import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import { reconcileStuckClaims } from '../../src/ops/reconciler.js'
import { createPostgresStore, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { jsonResponse, keyTable } from '../helpers/engine.js'
import { deadClaim } from './support/dead-claim.js'

// Issue 24: the reconciler holds its claim through the engine's lease and fenced write, so a
// write whose answer was lost is retried and recognised by read-back, as an owner's is.
const STALE = 60_000
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 7 } })
const quiet = { info() {}, warn() {}, error() {} }
const lostAnswer = () => Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' })

/** A store whose first call of `method` lands and then loses its answer. */
function losingFirstAnswer(method: 'complete' | 'suspend'): PostgresStore {
  const store = createPostgresStore({ pool: db.pool, schema: db.schema })
  let calls = 0
  const real = store[method].bind(store) as (...args: unknown[]) => Promise<boolean>
  return {
    ...store,
    [method]: async (...args: unknown[]) => {
      const landed = await real(...args)
      if (++calls === 1) throw lostAnswer()
      return landed
    },
  }
}

const reconcile = (store: PostgresStore, hook: Parameters<typeof reconcileStuckClaims<Queryable>>[0]['hook']) =>
  reconcileStuckClaims({ engine: createEngine<Queryable>({ store, staleAfterMs: STALE }), database: { pool: db.pool, schema: db.schema }, hook, olderThanMs: STALE, log: quiet })

describe('the reconciler writes through the fenced write', () => {
  it("complete whose answer was lost: retried, recognised as its own by read-back, reported completed", async () => {
    const scope = 'rfw-1'
    await deadClaim(db, { scope, key: 'lost-answer', fingerprint })
    const reports = await reconcile(losingFirstAnswer('complete'), async (claim) => {
      if (claim.scope === scope) await claim.complete(jsonResponse(201, '{"id":"ch_found"}'))
    })
    expect(reports.filter((r) => r.scope === scope)).toMatchObject([{ key: 'lost-answer', decision: 'completed' }])
    const { rows } = await db.pool.query(`SELECT status, response_status FROM ${keyTable(db)} WHERE scope = $1`, [scope])
    expect(rows).toEqual([{ status: 'completed', response_status: 201 }])
  })

  it('suspend whose answer was lost: retried, recognised by read-back, reported unresolved', async () => {
    const scope = 'rfw-2'
    await deadClaim(db, { scope, key: 'lost-suspend', fingerprint })
    const reports = await reconcile(losingFirstAnswer('suspend'), async () => undefined)
    expect(reports.filter((r) => r.scope === scope)).toMatchObject([{ key: 'lost-suspend', decision: 'unresolved' }])
    const { rows } = await db.pool.query(`SELECT status, fence_token FROM ${keyTable(db)} WHERE scope = $1`, [scope])
    expect(rows).toEqual([{ status: 'in_progress', fence_token: null }])
  })
})
