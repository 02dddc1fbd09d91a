import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ClaimWatcher, LISTEN_LINGER_MS } from '../../src/store/postgres/claim-watcher.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { until } from '../helpers/until.js'

// Issue 24: a claim stops being watched once its last waiter stops, so a long-lived store does not
// keep one entry per claim it ever watched.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('the claim watcher forgets a claim when its last waiter stops', () => {
  it('two waiters on one claim and one on another: the claim is kept while one of its waiters still watches, and none is left once all stopped', async () => {
    const pool = db.newPool(2)
    const watcher = new ClaimWatcher(pool, `oncely_cleanup_${randomUUID().slice(0, 8)}`, async () => true)
    const [one, other] = [randomUUID(), randomUUID()]
    const first = watcher.watch({ scope: 'u1', key: 'k1', claimId: one }, () => {})
    const second = watcher.watch({ scope: 'u1', key: 'k1', claimId: one }, () => {})
    const third = watcher.watch({ scope: 'u1', key: 'k2', claimId: other }, () => {})
    try {
      await until(() => first.live && second.live && third.live, 'the three watches to be live')
      expect(watcher.claims).toBe(2)
      first.stop()
      expect(watcher.claims).toBe(2)
      second.stop()
      expect(watcher.claims).toBe(1)
      third.stop()
      expect(watcher.claims).toBe(0)
      expect(watcher.waiting).toBe(0)
    } finally {
      first.stop()
      second.stop()
      third.stop()
      // The LISTEN connection goes after the linger, before the pool is closed with the database.
      await new Promise((resolve) => setTimeout(resolve, LISTEN_LINGER_MS * 2))
    }
  })
})
