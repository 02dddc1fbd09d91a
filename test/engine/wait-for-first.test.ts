import { getEventListeners } from 'node:events'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { createEngine, fingerprintRequest, type Decision, type Engine, type IdempotencyStore } from '../../src/index.js'
import { createRedisCache, withRedisCache } from '../../src/redis/index.js'
import type { ClaimWatch } from '../../src/engine/store.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred, latch } from '../helpers/deferred.js'
import { ageClaim, engineOn, jsonResponse, owned, storeClaim } from '../helpers/engine.js'
import { redisForTests, testRedis } from '../redis/support/test-redis.js'

// Issue 23, point 2: a duplicate that waits (`waitMs`) for the first request instead of a 409.
// Each test holds the first request on the test's own control and lets it go only once the
// waiter has read the row at least once, so the waiter is surely waiting: no sleeps.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase({ connections: 30 })
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const other = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 2000 } })
let n = 0
const newKey = () => `wait-${n++}`

/** The real store, with its reads counted and announced: the waiter's polls. */
function watchedReads<S extends IdempotencyStore<Queryable>>(store: S): { store: S; reads: () => number; claims: () => number; read: Promise<void> } {
  let reads = 0
  let claims = 0
  const first = deferred()
  const watched = {
    ...store,
    async claim(request: Parameters<S['claim']>[0]) {
      claims++
      return store.claim(request)
    },
    async read(scope: string, key: string) {
      reads++
      first.resolve()
      return store.read(scope, key)
    },
  }
  return { store: watched, reads: () => reads, claims: () => claims, read: first.promise }
}

function waiterOn(store: IdempotencyStore<Queryable>): Engine<Queryable> {
  return createEngine({ store, staleAfterMs: 30_000 })
}

describe('engine.begin with waitMs', () => {
  it('replays the first request once it completes, instead of a 409', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const watched = watchedReads(store)
    const waiting = waiterOn(watched.store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await watched.read
    await first.complete(jsonResponse(201, '{"id":"ch_1",  "b":1}'))
    const decision = await waiting
    expect(decision.kind).toBe('replay')
    if (decision.kind === 'replay') expect(Buffer.from(decision.response.body).toString()).toBe('{"id":"ch_1",  "b":1}')
  })

  it('without waitMs, answers the same duplicate 409 at once and reads nothing', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const watched = watchedReads(store)
    expect((await waiterOn(watched.store).begin({ scope: 'u1', key, fingerprint })).kind).toBe('conflict')
    expect(watched.reads()).toBe(0)
    await first.release()
  })

  it('without waitMs, or with 0, a 409 watches nothing either (no LISTEN subscription is made)', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    let watches = 0
    const watching: IdempotencyStore<Queryable> = {
      ...store,
      watchClaim(claim, wake) {
        watches++
        return store.watchClaim!(claim, wake)
      },
    }
    const waiter = createEngine({ store: watching, staleAfterMs: 30_000 })
    expect((await waiter.begin({ scope: 'u1', key, fingerprint })).kind).toBe('conflict')
    expect((await waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 0 })).kind).toBe('conflict')
    expect(watches).toBe(0)
    await first.release()
  })

  it('past the bound, answers 409 with the Retry-After judged on the claim as last read', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const watched = watchedReads(store)
    const decision = await waiterOn(watched.store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 30 })
    expect(decision).toEqual({ kind: 'conflict', retryAfterSeconds: 1 })
    expect(watched.reads()).toBeGreaterThan(0)
    await first.release()
  })

  it('past the bound on a claim whose owner stopped renewing, the hint is the time until it can be taken over', async () => {
    const key = newKey()
    const { store } = engineOn(db)
    const claimed = await storeClaim(store, { scope: 'u1', key, fingerprint })
    expect(claimed.kind).toBe('claimed')
    // Renewed 20 s ago under a 30 s threshold (renewals every 10 s): about 10 s to go.
    await db.pool.query(`UPDATE ${'"' + db.schema.replaceAll('"', '""') + '"'}.idempotency_key SET locked_at = now() - interval '20 seconds' WHERE scope = 'u1' AND key = $1`, [key])
    const decision = await waiterOn(store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 30 })
    expect(decision.kind).toBe('conflict')
    if (decision.kind === 'conflict') expect(decision.retryAfterSeconds).toBeGreaterThanOrEqual(9)
    if (decision.kind === 'conflict') expect(decision.retryAfterSeconds).toBeLessThanOrEqual(10)
  })

  it('owns the key through the claim statement when the first released it before any step, and runs once', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const watched = watchedReads(store)
    const waiting = waiterOn(watched.store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await watched.read
    await first.release()
    const mine = owned(await waiting)
    expect(mine.how).toBe('new')
    expect(mine.claimId).not.toBe(first.claimId)
    await mine.complete(jsonResponse(201, '{"id":"ch_2"}'))
    expect((await engine.begin({ scope: 'u1', key, fingerprint })).kind).toBe('replay')
  })

  it('takes over a claim that goes stale while it waits, with the claim identity kept', async () => {
    const key = newKey()
    const { store } = engineOn(db)
    const claimed = await storeClaim(store, { scope: 'u1', key, fingerprint })
    if (claimed.kind !== 'claimed') throw new Error('the key was not free')
    const watched = watchedReads(store)
    const waiting = waiterOn(watched.store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await watched.read
    await ageClaim(db, 'u1', key)
    const taker = owned(await waiting)
    expect([taker.how, taker.claimId]).toEqual(['take-over', claimed.claim.claimId])
    await taker.release()
  })

  it('a different request under the key is 422 at once, without waiting (Invariant 5)', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const watched = watchedReads(store)
    expect((await waiterOn(watched.store).begin({ scope: 'u1', key, fingerprint: other }, { waitMs: 600_000 })).kind).toBe('mismatch')
    expect(watched.reads()).toBe(0)
    await first.release()
  })

  it('stops waiting when the signal aborts, with the 409 it would have had', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const watched = watchedReads(store)
    const gone = new AbortController()
    const waiting = waiterOn(watched.store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000, signal: gone.signal })
    await watched.read
    gone.abort()
    expect(await waiting).toEqual({ kind: 'conflict', retryAfterSeconds: 1 })
    expect(first.state).toBe('running')
    await first.release()
  })

  it('a row that another request holds now under another body is 422 from the read that finds it, with no claim statement after it', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    // Each read of the waiter is held until the key has changed hands: the first request lets
    // it go and a request with another body claims it, so no read can find the key free.
    const reading = deferred()
    const changed = deferred()
    let claims = 0
    const held: IdempotencyStore<Queryable> = {
      ...store,
      async claim(request) {
        claims++
        return store.claim(request)
      },
      async read(scope, readKey) {
        reading.resolve()
        await changed.promise
        return store.read(scope, readKey)
      },
    }
    const waiting = waiterOn(held).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await reading.promise
    await first.release()
    const third = owned(await engine.begin({ scope: 'u1', key, fingerprint: other }))
    changed.resolve()
    expect(await waiting).toMatchObject({ kind: 'mismatch' })
    expect(claims).toBe(1)
    await third.release()
  })

  it('once waitMs has passed to the millisecond, answers the 409 of the last read and reads no more', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    // performance.now() stands still unless the test moves it: the first read returns (the claim
    // still in flight) exactly waitMs after the wait began, and only then does the first request
    // complete, so a read after the bound would replay it.
    vi.useFakeTimers({ toFake: ['performance'] })
    try {
      let reads = 0
      const timed: IdempotencyStore<Queryable> = {
        ...store,
        async read(scope, readKey) {
          reads++
          const snapshot = await store.read(scope, readKey)
          if (reads === 1) {
            vi.advanceTimersByTime(5_000)
            await first.complete(jsonResponse(201, '{"id":"ch_1"}'))
          }
          return snapshot
        },
      }
      const decision = await waiterOn(timed).begin({ scope: 'u1', key, fingerprint }, { waitMs: 5_000 })
      expect(decision).toEqual({ kind: 'conflict', retryAfterSeconds: 1 })
      expect(reads).toBe(1)
    } finally {
      vi.useRealTimers()
    }
    expect((await engine.begin({ scope: 'u1', key, fingerprint })).kind).toBe('replay')
  })

  it('refuses a waitMs that is not a number of milliseconds, naming it and the rule', async () => {
    const { engine } = engineOn(db)
    for (const waitMs of [-1, Number.NaN, Number.POSITIVE_INFINITY, '100' as unknown as number]) {
      await expect(engine.begin({ scope: 'u1', key: newKey(), fingerprint }, { waitMs }), String(waitMs)).rejects.toMatchObject({
        code: 'ONCELY_INVALID_OPTION',
        message: expect.stringMatching(/waitMs.*must be a finite number of milliseconds, 0 or more/) as unknown,
      })
    }
  })

  it('20 duplicates at once on 20 connections: one executes, the 19 others wait and replay it', async () => {
    const key = newKey()
    const width = 20
    const pools = Array.from({ length: width }, () => new pg.Pool({ connectionString: db.url, max: 1 }))
    try {
      await Promise.all(pools.map(async (pool) => (await pool.connect()).release()))
      const allWaiting = latch(width)
      const engines = pools.map((pool) => {
        const watched = watchedReads(createPostgresStore({ pool, schema: db.schema }))
        void watched.read.then(() => allWaiting.arrive())
        return waiterOn(watched.store)
      })
      const start = latch(width)
      let executions = 0
      const decisions = await Promise.all(
        engines.map(async (engine): Promise<Decision<Queryable>['kind']> => {
          await start.arrive()
          const decision = await engine.begin({ scope: 'u20', key, fingerprint }, { waitMs: 600_000 })
          if (decision.kind === 'execute') {
            executions++
            // The owner counts as arrived: it finishes once the 19 others have all read the row.
            await allWaiting.arrive()
            await decision.execution.complete(jsonResponse(201, '{"id":"ch_20"}'))
          }
          return decision.kind
        }),
      )
      expect(executions).toBe(1)
      expect(decisions.filter((kind) => kind === 'replay')).toHaveLength(width - 1)
    } finally {
      await Promise.all(pools.map((pool) => pool.end()))
    }
  })
})

const redis = await redisForTests()

describe.skipIf(!redis.run)('engine.begin with waitMs behind the Redis cache', () => {
  it('reads PostgreSQL while it waits, so a cache still saying "in flight" never holds it to a 409 (Invariant 10)', async () => {
    const client = await testRedis()
    try {
      const key = newKey()
      const cache = createRedisCache({ redis: client.redis, secret: 'the wait-for-first test secret', prefix: client.prefix, namespace: db.schema, staleAfterMs: 30_000, inFlightMaxMs: 25_000 })
      const plain = createPostgresStore({ pool: db.pool, schema: db.schema })
      const cachedEngine = createEngine<Queryable>({ store: withRedisCache(plain, cache), staleAfterMs: 30_000 })
      // Claimed through the cache (which now holds it as in flight), completed past it.
      const first = owned(await cachedEngine.begin({ scope: 'u1', key, fingerprint }))
      const fenced = { scope: 'u1', key, fenceToken: first.fenceToken }
      const watched = watchedReads(withRedisCache(plain, cache))
      const waiting = waiterOn(watched.store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
      await watched.read
      expect(await plain.complete(fenced, { status: 'completed', response: jsonResponse(201, '{"id":"ch_r"}') })).toBe(true)
      expect((await cachedEngine.begin({ scope: 'u1', key, fingerprint })).kind).toBe('conflict')
      const decision = await waiting
      expect(decision.kind).toBe('replay')
      // Answered from the row PostgreSQL gave, not by claiming again through the cache.
      expect(watched.claims()).toBe(1)
      // Its fence is gone with the completion written past it: the release only stops its timer.
      await expect(first.release()).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    } finally {
      await client.flush()
      await client.close()
    }
  })
})

describe('waiting, in detail (mutation survivors of wait.ts)', () => {
  /** The real store with its reads counted and timed and no wake-up; `failNextRead` makes its next read fail. */
  function pollingStore(store: IdempotencyStore<Queryable>) {
    let reads = 0
    const readAt: number[] = []
    let failNext: Error | undefined
    const firstRead = deferred()
    const firstAnswered = deferred()
    const polling: IdempotencyStore<Queryable> = {
      ...store,
      async read(scope, key) {
        reads++
        readAt.push(performance.now())
        firstRead.resolve()
        if (failNext !== undefined) {
          const error = failNext
          failNext = undefined
          throw error
        }
        const row = await store.read(scope, key)
        firstAnswered.resolve()
        return row
      },
    }
    // No wake-up: the waiter polls.
    Reflect.deleteProperty(polling, 'watchClaim')
    return { store: polling, reads: () => reads, readAt, firstRead: firstRead.promise, firstAnswered: firstAnswered.promise, failNextRead: (error: Error) => (failNext = error) }
  }

  it("past the bound, a live claim's 409 carries the engine's conflictRetryAfterSeconds", async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const waiter = createEngine({ store: pollingStore(store).store, staleAfterMs: 30_000, conflictRetryAfterSeconds: 5 })
    expect(await waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 30 })).toEqual({ kind: 'conflict', retryAfterSeconds: 5 })
    await first.release()
  })

  it('an abort ends the pause at once and nothing is read after it', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const polling = pollingStore(store)
    // The pause after the first read is 2 to 4 s (it doubles from 2 s, with jitter on its upper
    // half): an abort that did not end it would be answered only after it.
    const waiter = createEngine({ store: polling.store, staleAfterMs: 30_000, waitFirstPollMs: 2_000, waitMaxPollMs: 5_000 })
    const gone = new AbortController()
    const waiting = waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000, signal: gone.signal })
    await polling.firstAnswered
    // The waiter goes on to its next pause within the same turn of the event loop.
    await new Promise((resolve) => setImmediate(resolve))
    const abortedAt = performance.now()
    gone.abort()
    expect(await waiting).toEqual({ kind: 'conflict', retryAfterSeconds: 1 })
    expect(performance.now() - abortedAt).toBeLessThan(1_000)
    expect(polling.reads()).toBe(1)
    await first.release()
  })

  it('each pause takes its abort listener away again', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const polling = pollingStore(store)
    const waiter = createEngine({ store: polling.store, staleAfterMs: 30_000, waitFirstPollMs: 5, waitMaxPollMs: 10 })
    const signal = new AbortController().signal
    const waiting = waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000, signal })
    while (polling.reads() < 4) await new Promise((resolve) => setTimeout(resolve, 5))
    await first.complete(jsonResponse(201, '{}'))
    expect((await waiting).kind).toBe('replay')
    expect(getEventListeners(signal, 'abort')).toHaveLength(0)
  })

  it('a transient read error while waiting is read past; any other is thrown', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const polling = pollingStore(store)
    const waiter = createEngine({ store: polling.store, staleAfterMs: 30_000, waitFirstPollMs: 5, waitMaxPollMs: 20 })
    polling.failNextRead(Object.assign(new Error('the database blinked'), { code: '57P01' }))
    const waiting = waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await polling.firstRead
    while (polling.reads() < 2) await new Promise((resolve) => setTimeout(resolve, 5))
    await first.complete(jsonResponse(201, '{"after":"blip"}'))
    expect((await waiting).kind).toBe('replay')

    const other = newKey()
    const holder = owned(await engine.begin({ scope: 'u1', key: other, fingerprint }))
    polling.failNextRead(new Error('not a database error'))
    await expect(waiter.begin({ scope: 'u1', key: other, fingerprint }, { waitMs: 600_000 })).rejects.toThrow('not a database error')
    await holder.release()
  })

  it('while the watch is live, reads seldom: not at the polling pace', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    let reads = 0
    const live: IdempotencyStore<Queryable> = {
      ...store,
      // Live, and never rung: only the seldom reads can see the claim.
      watchClaim: () => ({ live: true, stop: () => undefined }),
      async read(scope, k) {
        reads++
        return store.read(scope, k)
      },
    }
    // Polling would read every 5 to 10 ms, 30 times or more in the bound; a live watch reads once a
    // minute, its pause cut to what is left of the bound: once at its end, or twice when the timer
    // fired a few ms early (Node counts it from the event loop's cached clock, behind the real one
    // under load) and what was left of the bound ended with one more read (seen once in CI).
    const waiter = createEngine({ store: live, staleAfterMs: 30_000, waitFirstPollMs: 5, waitMaxPollMs: 10, waitWatchedPollMs: 60_000 })
    expect((await waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 300 })).kind).toBe('conflict')
    expect(reads).toBeGreaterThanOrEqual(1)
    expect(reads).toBeLessThanOrEqual(2)
    await first.release()
  })

  it('without a live watch, the pause between reads doubles from waitFirstPollMs and stops at waitMaxPollMs', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const polling = pollingStore(store)
    // Pauses of 100, 200, 400 ms (each jittered to between half and all of it), at most 1,600.
    const waiter = createEngine({ store: polling.store, staleAfterMs: 30_000, waitFirstPollMs: 100, waitMaxPollMs: 1_600 })
    const waiting = waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    while (polling.reads() < 3) await new Promise((resolve) => setTimeout(resolve, 20))
    await first.complete(jsonResponse(201, '{}'))
    expect((await waiting).kind).toBe('replay')
    const [one, two, three] = polling.readAt as [number, number, number]
    // The second pause is 100 to 200 ms: far below the 800 to 1,600 ms of a pause at the cap at
    // once. The third is 200 to 400 ms: far above a pause that halved (25 to 50 ms). Timers are
    // late under load, never early, so the slack is on the side of lateness only.
    expect(two - one).toBeLessThan(700)
    expect(three - two).toBeGreaterThanOrEqual(190)
  })

  it('a claim that takes the key over from the one it waited for is watched in its place', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const watched: string[] = []
    let reads = 0
    const gate = deferred()
    const secondRead = deferred()
    const watching: IdempotencyStore<Queryable> = {
      ...store,
      watchClaim(claim, wake) {
        watched.push(claim.claimId)
        const inner: ClaimWatch = store.watchClaim!(claim, wake)
        return { live: false, stop: () => inner.stop() }
      },
      async read(scope, k) {
        reads++
        // The second read waits until the first has let the key go and a third request holds it.
        if (reads === 2) {
          secondRead.resolve()
          await gate.promise
        }
        return store.read(scope, k)
      },
    }
    const waiter = createEngine({ store: watching, staleAfterMs: 30_000, waitFirstPollMs: 5, waitMaxPollMs: 10 })
    const waiting = waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await secondRead.promise
    await first.release()
    const third = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    gate.resolve()
    while (watched.length < 2) await new Promise((resolve) => setTimeout(resolve, 5))
    await third.complete(jsonResponse(201, '{"from":"third"}'))
    const answer = await waiting
    expect(answer.kind).toBe('replay')
    expect(watched).toEqual([first.claimId, third.claimId])
  })

  it('a wake-up that rings while no pause runs ends the next pause at once', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    let wake: (() => void) | undefined
    let reads = 0
    const ringing: IdempotencyStore<Queryable> = {
      ...store,
      watchClaim(_claim, wakeUp) {
        wake = wakeUp
        // Not live before the first read, so the first pause is a short poll; live after it.
        return {
          get live() {
            return reads > 0
          },
          stop: () => undefined,
        }
      },
      async read(scope, k) {
        reads++
        const row = await store.read(scope, k)
        // The first request completes while the waiter reads (it saw the claim in flight), and
        // the wake-up rings before the waiter's next pause has begun.
        if (reads === 1) {
          await first.complete(jsonResponse(201, '{"rang":"between"}'))
          wake?.()
        }
        return row
      },
    }
    // A live watch's own reads are a minute apart: only the ring can end that pause early.
    const waiter = createEngine({ store: ringing, staleAfterMs: 30_000, waitFirstPollMs: 5, waitWatchedPollMs: 60_000 })
    const startedAt = performance.now()
    const answer = await waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 20_000 })
    expect(answer.kind).toBe('replay')
    expect(reads).toBe(2)
    expect(performance.now() - startedAt).toBeLessThan(5_000)
  }, 30_000)

  it('watches one claim once while it holds the key', async () => {
    const key = newKey()
    const { engine, store } = engineOn(db, { staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    const watched: string[] = []
    let reads = 0
    const watching: IdempotencyStore<Queryable> = {
      ...store,
      watchClaim(claim, wake) {
        watched.push(claim.claimId)
        // A watch that is not live: the waiter polls, quickly here.
        const inner: ClaimWatch = store.watchClaim!(claim, wake)
        return { live: false, stop: () => inner.stop() }
      },
      async read(scope, k) {
        reads++
        return store.read(scope, k)
      },
    }
    const waiter = createEngine({ store: watching, staleAfterMs: 30_000, waitFirstPollMs: 5, waitMaxPollMs: 10 })
    const waiting = waiter.begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    while (reads < 4) await new Promise((resolve) => setTimeout(resolve, 5))
    await first.complete(jsonResponse(201, '{}'))
    expect((await waiting).kind).toBe('replay')
    expect(watched).toEqual([first.claimId])
  })
})
