import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { countRunningClaims, keyStats } from '../../src/ops/key-stats.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// keyStats and the metrics' running-claims gauges, each read on a pool of its own, so the
// statements are built in the test that reads them (they are resolved once per pool and schema).

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })
const STALE = 60_000

/** One claim held and fresh, one suspended, one whose owner died an hour ago, one completed and expired. */
async function seed() {
  const { engine } = engineOn(db, { staleAfterMs: 30_000 })
  const held = owned(await engine.begin({ scope: 'u1', key: 'held', fingerprint }))
  const suspended = owned(await engine.begin({ scope: 'u1', key: 'suspended', fingerprint }))
  await suspended.suspend()
  const expired = owned(await engine.begin({ scope: 'u1', key: 'expired', fingerprint }))
  await expired.complete(jsonResponse(201, '{}'))
  const dying = owned(await engine.begin({ scope: 'u1', key: 'dying', fingerprint }))
  await db.pool.query(`UPDATE ${keyTable(db)} SET created_at = now() - interval '2 hours' WHERE key = 'dying'`)
  await ageClaim(db, 'u1', 'dying')
  await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '10 minutes' WHERE key = 'expired'`)
  return { held, dying }
}

describe('the running claims, read on a fresh pool', () => {
  it('keyStats counts each state, the oldest running claim, the table size and the sweeper lag', async () => {
    const { held, dying } = await seed()
    const pool = db.newPool(1)
    const stats = await keyStats({ pool, schema: db.schema }, { staleAfterMs: STALE })
    expect(stats.counts).toEqual({ inProgress: 3, held: 2, suspended: 1, stuck: 2, completed: 1, failed: 0 })
    expect(stats.sweeper.expiredUnswept).toBe(1)
    expect(stats.sweeper.lagMs).toBeGreaterThanOrEqual(600_000)
    expect(stats.sweeper.lagMs).toBeLessThan(3_600_000)
    expect(stats.oldestRunning?.ageMs).toBeGreaterThanOrEqual(7_200_000)
    expect(stats.oldestRunning?.leaseAgeMs).toBeGreaterThanOrEqual(3_600_000)
    expect(stats.oldestRunning?.leaseAgeMs).toBeLessThan(7_200_000)
    expect(Date.parse(stats.oldestRunning?.createdAt ?? '')).toBeLessThanOrEqual(Date.now() - 7_200_000)
    expect(stats.tableBytes).toBeGreaterThan(0)

    const gauges = await countRunningClaims({ pool, schema: db.schema }, STALE)
    expect(gauges).toMatchObject({ held: 2, suspended: 1, staleByLease: 1, staleByCreation: 1 })
    expect(gauges.oldestLeaseAgeMs).toBeGreaterThanOrEqual(3_600_000)
    expect(gauges.oldestLeaseAgeMs).toBeLessThan(7_200_000)
    expect(gauges.oldestAgeMs).toBeGreaterThanOrEqual(7_200_000)
    await held.suspend()
    await dying.suspend().catch(() => undefined)
  })
})
