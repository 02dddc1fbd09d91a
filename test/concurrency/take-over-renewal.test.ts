import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import type { IdempotencyStore } from '../../src/engine/store.js'
import type { Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { ageClaim, engineOn } from '../helpers/engine.js'

// Invariant 4 against its nearest miss (issue 13): a retry reads the claim as stale, and the
// owner renews its lease before the retry's take-over statement runs. The take-over re-checks
// staleness in the database, so it must match nothing: the live owner keeps its claim and the
// retry gets a 409. A latch holds the retry between its read and its take-over.
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })

/** The store, with every take-over held until `release` resolves, once `readDone` has fired. */
function holdTakeOver(store: IdempotencyStore<Queryable>) {
  const readDone = deferred()
  const release = deferred()
  const held: IdempotencyStore<Queryable> = {
    ...store,
    async takeOver(seen, take) {
      readDone.resolve()
      await release.promise
      return store.takeOver(seen, take)
    },
  }
  return { held, readDone, release }
}

describe('a lease renewed between a retry read and its take-over', () => {
  it('keeps the live owner: the retry gets a conflict and the owner still writes', async () => {
    const { engine: ownerEngine, store } = engineOn(db, { staleAfterMs: 60_000 })
    const owner = await ownerEngine.begin({ scope: 'u1', key: 'renewed-1', fingerprint })
    if (owner.kind !== 'execute') throw new Error(`expected execute, got ${owner.kind}`)
    // The owner looks stale to the retry: its lease is an hour old.
    await ageClaim(db, 'u1', 'renewed-1')

    const { held, readDone, release } = holdTakeOver(store)
    const retryEngine = createEngine({ store: held, staleAfterMs: 1000 })
    const retry = retryEngine.begin({ scope: 'u1', key: 'renewed-1', fingerprint })
    await readDone.promise
    // Between the retry's read and its compare-and-swap, the owner renews (its timer would).
    expect(await store.renewLease({ scope: 'u1', key: 'renewed-1', fenceToken: owner.execution.fenceToken }, 86_400_000)).toBe(true)
    release.resolve()

    const decision = await retry
    expect(decision.kind).toBe('conflict')
    await owner.execution.step('charge', () => ({ id: 'ch_1' }))
    await owner.execution.complete({ status: 201, headers: [], body: Buffer.from('{"id":"ch_1"}') })
    expect(owner.execution.state).toBe('completed')
  })

  it('without the renewal the same held retry takes the claim over (the test can tell)', async () => {
    const { engine: ownerEngine, store } = engineOn(db, { staleAfterMs: 60_000 })
    const owner = await ownerEngine.begin({ scope: 'u1', key: 'renewed-2', fingerprint })
    if (owner.kind !== 'execute') throw new Error(`expected execute, got ${owner.kind}`)
    await ageClaim(db, 'u1', 'renewed-2')

    const { held, readDone, release } = holdTakeOver(store)
    const retry = createEngine({ store: held, staleAfterMs: 1000 }).begin({ scope: 'u1', key: 'renewed-2', fingerprint })
    await readDone.promise
    release.resolve()
    const decision = await retry
    expect(decision.kind).toBe('execute')
    if (decision.kind === 'execute') {
      expect(decision.execution.how).toBe('take-over')
      await decision.execution.suspend()
    }
    await expect(owner.execution.step('charge', () => ({ id: 'ch_2' }))).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
  })
})
