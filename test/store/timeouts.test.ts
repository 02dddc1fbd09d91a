import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, isOncelyError } from '../../src/index.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { keyTable } from '../helpers/engine.js'
import { waitUntil } from '../outbox/support/wait.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 2 } })

describe('no request hangs behind a held lock (issue 8: statement and lock timeouts)', () => {
  it('the table locked ACCESS EXCLUSIVE: begin gives up with ONCELY_STORE_UNAVAILABLE, and leaves no claim behind once the lock is gone', async () => {
    const locker = await db.pool.connect()
    const pool = db.newPool(4)
    pool.on('error', () => undefined)
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 1500, lockTimeoutMs: 500 })
    const engine = createEngine({ store, claimRetryMs: 1000 })
    try {
      await locker.query('BEGIN')
      await locker.query(`LOCK TABLE ${keyTable(db)} IN ACCESS EXCLUSIVE MODE`)
      const keys = Array.from({ length: 5 }, (_, i) => `locked-${i}`)
      const outcomes = await Promise.all(keys.map((key) => engine.begin({ scope: 'u1', key, fingerprint }).then((d) => d.kind, (e: unknown) => e)))
      for (const outcome of outcomes) expect(isOncelyError(outcome, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      await locker.query('COMMIT')
      // The statements the store gave up on may run once the lock is released; a claim that lands
      // so is nobody's, and the engine lets go of it in the background (issue 22): none stays.
      await waitUntil('no claim of a given-up begin is left', async () => (await db.pool.query(`SELECT key FROM ${keyTable(db)} WHERE key LIKE 'locked-%'`)).rowCount === 0, 10_000)
      expect((await engine.begin({ scope: 'u1', key: 'locked-0', fingerprint })).kind).toBe('execute')
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined)
      locker.release()
    }
  })
})
