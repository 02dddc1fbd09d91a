import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OncelyError, createEngine, fingerprintRequest, type Execution } from '../../src/index.js'
import { createPostgresStore, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { ageClaim, engineOn, jsonResponse, owned, recordEvents } from '../helpers/engine.js'

// The lease renewal runs beside everything else the worker does (issue 13). While the worker
// ends its claim, a renewal that finds the fence gone is the worker's own ending, not a
// take-over: the execution ends as it ended and publishes that once, never lock-lost. After an
// ending that threw and left the claim held, a refused renewal is a take-over again. Renewals
// and held answers are ordered with promises, never with sleeps.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE charges (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 21 } })
const input = (key: string) => ({ scope: 'u1', key, fingerprint })
const END_EVENTS = ['completed', 'failed', 'released', 'suspended', 'lock-lost'] as const
const nextMacrotask = () => new Promise((resolve) => setImmediate(resolve))

/** The end events published for `key` while `run` runs. */
async function endEventsOf(key: string, run: () => Promise<void>): Promise<string[]> {
  const events = await recordEvents(run)
  return events.filter((event) => event.key === key && (END_EVENTS as readonly string[]).includes(event.event)).map((event) => event.event)
}

/**
 * An engine on the real store whose renewals wait at a gate and report the first one the
 * database refused; `overrides` may hold a write's answer until then.
 */
function renewingEngine(overrides: (store: PostgresStore, refused: Promise<void>) => Partial<PostgresStore> = () => ({})) {
  const store = createPostgresStore({ pool: db.pool, schema: db.schema })
  const renewals = deferred()
  const refused = deferred()
  const engine = createEngine<Queryable>({
    staleAfterMs: 60_000,
    leaseRenewMs: 5,
    store: {
      ...store,
      renewLease: async (fence, ttlMs) => {
        await renewals.promise
        const renewed = await store.renewLease(fence, ttlMs)
        if (!renewed) refused.resolve()
        return renewed
      },
      ...overrides(store, refused.promise),
    },
  })
  return { engine, openRenewals: () => renewals.resolve(), refused: refused.promise }
}

/** Waits for `refused`, then lets the refused renewal's own continuation run first. */
async function afterRefusal<T>(refused: Promise<void>, answer: T): Promise<T> {
  await refused
  await nextMacrotask()
  return answer
}

describe('a renewal refused while the worker ends its claim', () => {
  // Each ending's write lands, its answer is held until a renewal has found the fence gone, and
  // only then reaches the worker.
  const endings: { name: string; event: string; state: Execution['state']; hold: (store: PostgresStore, refused: Promise<void>) => Partial<PostgresStore>; end: (execution: Execution<Queryable>, key: string) => Promise<unknown> }[] = [
    {
      name: 'complete',
      event: 'completed',
      state: 'completed',
      hold: (store, refused) => ({ complete: async (...args) => afterRefusal(refused, await store.complete(...args)) }),
      end: (execution) => execution.complete(jsonResponse(201, '{}')),
    },
    {
      name: 'fail with statements (one flight)',
      event: 'failed',
      state: 'failed',
      hold: (store, refused) => ({ complete: async (...args) => afterRefusal(refused, await store.complete(...args)) }),
      end: (execution, key) => execution.fail(jsonResponse(402, '{}'), { statements: [{ text: 'INSERT INTO charges (id) VALUES ($1)', values: [key] }] }),
    },
    {
      name: 'completeInTransaction',
      event: 'completed',
      state: 'completed',
      hold: (store, refused) => ({ transaction: async (work) => afterRefusal(refused, await store.transaction(work)) }),
      end: (execution) => execution.completeInTransaction(async () => ({ response: jsonResponse(201, '{}'), value: 1 })),
    },
    {
      name: 'release',
      event: 'released',
      state: 'released',
      hold: (store, refused) => ({ release: async (...args) => afterRefusal(refused, await store.release(...args)) }),
      end: (execution) => execution.release(),
    },
    {
      name: 'suspend',
      event: 'suspended',
      state: 'suspended',
      hold: (store, refused) => ({ suspend: async (...args) => afterRefusal(refused, await store.suspend(...args)) }),
      end: (execution) => execution.suspend(),
    },
  ]

  for (const [index, ending] of endings.entries()) {
    it(`${ending.name}: ends ${ending.state} and publishes ${ending.event} once, never lock-lost`, async () => {
      const key = `finishing-${index}`
      const { engine, openRenewals, refused } = renewingEngine(ending.hold)
      const execution = owned(await engine.begin(input(key)))
      openRenewals()
      const events = await endEventsOf(key, async () => {
        await ending.end(execution, key)
      })
      await refused
      expect(execution.state).toBe(ending.state)
      expect(events).toEqual([ending.event])
    })
  }
})

describe('after an ending that threw and left the claim held, a refused renewal is a take-over again', () => {
  const transient = () => Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' })
  const boom = () => new Error('the write was refused')

  const failures: { name: string; fail: (store: PostgresStore) => Partial<PostgresStore>; end?: (execution: Execution<Queryable>) => Promise<unknown> }[] = [
    { name: 'no ending tried yet', fail: () => ({}) },
    {
      name: "complete in the caller's transaction, which broke",
      fail: (store) => ({ complete: (fence, completion) => (completion.tx === undefined ? store.complete(fence, completion) : Promise.reject(transient())) }),
      end: (execution) => execution.complete(jsonResponse(201, '{}'), { tx: db.pool }),
    },
    {
      name: "completeInTransaction whose work threw an oncely error",
      fail: () => ({}),
      end: (execution) => execution.completeInTransaction(() => Promise.reject(new OncelyError('ONCELY_INVALID_OPTION', 'refused by the caller'))),
    },
    {
      name: 'release, refused by the database',
      fail: () => ({ release: () => Promise.reject(boom()) }),
      end: (execution) => execution.release(),
    },
    {
      name: 'suspend, refused by the database',
      fail: () => ({ suspend: () => Promise.reject(boom()) }),
      end: (execution) => execution.suspend(),
    },
  ]

  for (const [index, failure] of failures.entries()) {
    it(`${failure.name}: the worker ends lost and runs no further step`, async () => {
      const key = `threw-then-taken-${index}`
      const { engine, openRenewals, refused } = renewingEngine(failure.fail)
      const execution = owned(await engine.begin(input(key)))
      if (failure.end !== undefined) await expect(failure.end(execution)).rejects.toThrow()
      expect(execution.state).toBe('running')

      await ageClaim(db, 'u1', key)
      const taker = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
      expect(taker.how).toBe('take-over')
      const events = await endEventsOf(key, async () => {
        openRenewals()
        await refused
        await nextMacrotask()
      })
      expect(execution.state).toBe('lost')
      expect(events).toEqual(['lock-lost'])
      let ran = false
      await expect(execution.step('charge', () => (ran = true))).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
      expect(ran).toBe(false)
      await taker.complete(jsonResponse(201, '{}'))
    })
  }
})

describe('the retry deadline counts from the last write that renewed the lease (issue 8, path 4)', () => {
  // With the database away, a write is retried until the lease would have run out: staleAfterMs
  // after the last write or renewal that landed, not after the claim. Each case lets the lease be
  // renewed 1.5 s after the claim, then takes the database away: the write must still be retried
  // for staleAfterMs − the longest backoff (2 s) after that renewal, which a deadline counted from
  // the claim (3 s after it) would have cut short. Bounds on timestamps, not races: the retry
  // gives up at the earliest `renewedAt + 2000`, however slow the machine.
  const STALE_AFTER_MS = 3000
  const LONGEST_BACKOFF_MS = 1000
  const transient = () => Object.assign(new Error('the database is away'), { code: '57P01' })

  /** Commits fail while `away`; renewals too once the database is away. */
  function awayEngine(leaseRenewMs: number) {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const state = { away: false, renewedAt: [] as number[] }
    const engine = createEngine<Queryable>({
      staleAfterMs: STALE_AFTER_MS,
      leaseRenewMs,
      store: {
        ...store,
        renewLease: async (fence, ttlMs) => {
          // Called in the same turn as the engine reads its send time.
          const calledAt = performance.now()
          if (state.away) throw transient()
          const renewed = await store.renewLease(fence, ttlMs)
          if (renewed) state.renewedAt.push(calledAt)
          return renewed
        },
        commitStep: (...args) => (state.away ? Promise.reject(transient()) : store.commitStep(...args)),
      },
    })
    return { engine, state }
  }

  it.concurrent("a step's commit that landed", async () => {
    // Renewals every 2.5 s: none lands before the step's commit, which is the last renewing write.
    const { engine, state } = awayEngine(2500)
    const execution = owned(await engine.begin(input('deadline-after-write')))
    const claimedAt = performance.now()
    await new Promise((resolve) => setTimeout(resolve, 1500))
    const committedFrom = performance.now()
    await execution.step('a', () => 1)
    expect(state.renewedAt).toEqual([])
    state.away = true
    await expect(execution.step('b', () => 2)).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })
    const gaveUpAt = performance.now()
    expect(committedFrom - claimedAt).toBeGreaterThanOrEqual(1000)
    expect(gaveUpAt - committedFrom).toBeGreaterThanOrEqual(STALE_AFTER_MS - LONGEST_BACKOFF_MS)
  })

  it.concurrent('a renewal that landed', async () => {
    const { engine, state } = awayEngine(250)
    const execution = owned(await engine.begin(input('deadline-after-renewal')))
    const claimedAt = performance.now()
    while ((state.renewedAt.at(-1) ?? 0) - claimedAt < 1500) await new Promise((resolve) => setTimeout(resolve, 50))
    state.away = true
    const renewedAt = state.renewedAt.at(-1)!
    await expect(execution.step('a', () => 1)).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })
    expect(performance.now() - renewedAt).toBeGreaterThanOrEqual(STALE_AFTER_MS - LONGEST_BACKOFF_MS)
  })
})
