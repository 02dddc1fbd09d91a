import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { OutcomeEvent } from '../../src/adapters/http.js'
import { createEngine } from '../../src/engine/engine.js'
import type { EngineOptions } from '../../src/engine/options.js'
import type { ClaimWatch, IdempotencyStore } from '../../src/engine/store.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred, type Deferred } from '../helpers/deferred.js'
import { until } from '../helpers/until.js'
import type { AdapterHarness, AppUnderTest, HandlerInput, HandlerOutput, TestOptions, TestRequest, TestRoute } from './harness.js'

// Issue 23, point 2, for every adapter: `waitMs` turns a duplicate's 409 into the first
// request's replay. The first request is held on a deferred and let go only once the duplicate
// is surely waiting (its claim was answered, or it has read the row): no sleeps.

/** Reads so seldom (half a minute at the earliest) that an answer within seconds comes from a notification. */
const LONG_POLL = { waitFirstPollMs: 60_000, waitMaxPollMs: 60_000, waitWatchedPollMs: 60_000 }

const scopeFromBearer = (authorization: string | undefined) => /^Bearer demo_([1-9]\d*)$/.exec(authorization ?? '')?.[1]
const json = (status: number, body: object): HandlerOutput => ({ status, headers: { 'content-type': 'application/json; charset=utf-8' }, body: JSON.stringify(body) })

function counted(path: string, handler: (input: HandlerInput, call: number) => Promise<HandlerOutput>) {
  const route = { method: 'POST' as const, path, calls: 0, handler: async (input: HandlerInput) => handler(input, ++route.calls) }
  return route
}

/** The test database's store, announcing each answered claim and each read (the waiter's polls), and counting its waiters' watches. */
function watchedStore(db: TestDatabase) {
  const store = createPostgresStore({ pool: db.pool, schema: db.schema })
  const watch = { claims: 0, reads: 0, watching: 0, live: [] as ClaimWatch[], firstRead: deferred(), claimsAnswered: new Map<number, Deferred<void>>() }
  const claimsAnswered = (count: number) => {
    const existing = watch.claimsAnswered.get(count) ?? deferred()
    watch.claimsAnswered.set(count, existing)
    if (watch.claims >= count) existing.resolve()
    return existing.promise
  }
  const watched: IdempotencyStore<Queryable> = {
    ...store,
    async claim(request) {
      const attempt = await store.claim(request)
      watch.claims++
      for (const [count, waiting] of watch.claimsAnswered) if (watch.claims >= count) waiting.resolve()
      return attempt
    },
    async read(scope, key) {
      watch.reads++
      watch.firstRead.resolve()
      return store.read(scope, key)
    },
    watchClaim(claim, wake) {
      const watching = store.watchClaim?.(claim, wake)
      if (watching === undefined) throw new Error('the test store listens')
      watch.watching++
      watch.live.push(watching)
      return {
        get live() {
          return watching.live
        },
        stop() {
          watch.watching--
          watching.stop()
        },
      }
    },
  }
  return { store: watched, watch, claimsAnswered }
}

export function waitConformance(harness: AdapterHarness): void {
  describe(`${harness.name} adapter: waitMs`, () => {
    let db: TestDatabase
    beforeAll(async () => {
      db = await createTestDatabase()
    })
    afterAll(async () => {
      await db.close()
    })

    async function withApp(
      options: Partial<TestOptions>,
      routes: TestRoute[],
      test: (app: AppUnderTest, watched: ReturnType<typeof watchedStore>) => Promise<void>,
      engineOptions: Partial<EngineOptions<Queryable>> = {},
    ) {
      const watched = watchedStore(db)
      const engine = createEngine({ store: watched.store, staleAfterMs: 30_000, ...engineOptions })
      const app = await harness.start({ engine, scope: scopeFromBearer, log: () => {}, ...options }, routes)
      try {
        await test(app, watched)
      } finally {
        await app.close()
      }
    }
    const post = (path: string, key: string, signal?: AbortSignal): TestRequest => ({
      method: 'POST',
      path,
      body: { amount: 1 },
      headers: { authorization: 'Bearer demo_1', 'idempotency-key': key },
      ...(signal === undefined ? {} : { signal }),
    })
    /** The pool's connections in use: none once no request runs and the LISTEN connection is let go. */
    const inUse = () => db.pool.totalCount - db.pool.idleCount

    /** A route whose first call is held until `release`; later calls answer at once. */
    function held(path: string, first: (call: number) => Promise<HandlerOutput> = async (call) => json(201, { id: `ch_${call}` })) {
      const started = deferred()
      const release = deferred()
      const route = counted(path, async (_input, call) => {
        if (call === 1) {
          started.resolve()
          await release.promise
        }
        return first(call)
      })
      return { route, started: started.promise, release: () => release.resolve() }
    }

    it('a duplicate waits for the held first request and gets its replay, not 409', async () => {
      const slow = held('/v1/charges')
      const events: OutcomeEvent[] = []
      await withApp({ waitMs: 600_000, onOutcome: (event) => events.push(event) }, [slow.route], async (app, { watch }) => {
        const key = randomUUID()
        const first = app.request(post('/v1/charges', key))
        await slow.started
        const duplicate = app.request(post('/v1/charges', key))
        await watch.firstRead.promise
        slow.release()
        const [a, b] = await Promise.all([first, duplicate])
        expect([a.status, b.status]).toEqual([201, 201])
        expect(b.body.equals(a.body)).toBe(true)
        expect(b.headers.get('idempotent-replayed')).toBe('true')
        expect(b.headers.get('retry-after')).toBeNull()
        expect(slow.route.calls).toBe(1)
        expect(events.map((event) => event.outcome).sort()).toEqual(['created', 'replayed'])
      })
    })

    it('with waitMs below the hold, answers 409 with Retry-After once the bound has passed', async () => {
      const slow = held('/v1/charges')
      await withApp({ waitMs: 30 }, [slow.route], async (app, { watch }) => {
        const key = randomUUID()
        const first = app.request(post('/v1/charges', key))
        await slow.started
        const duplicate = await app.request(post('/v1/charges', key))
        expect(duplicate.status).toBe(409)
        expect(Number(duplicate.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
        expect(watch.reads).toBeGreaterThan(0)
        slow.release()
        expect((await first).status).toBe(201)
      })
    })

    it('takes a per-route waitMs from the method and the route pattern: 0 answers 409 at once', async () => {
      const slow = held('/v1/orders/:order/charges')
      const asked: string[] = []
      const waitMs = (method: string, route: string) => (asked.push(`${method} ${route}`), route === '/v1/refunds' ? 600_000 : 0)
      await withApp({ waitMs }, [slow.route], async (app, { watch }) => {
        const key = randomUUID()
        const first = app.request(post('/v1/orders/o1/charges', key))
        await slow.started
        expect((await app.request(post('/v1/orders/o1/charges', key))).status).toBe(409)
        expect(watch.reads).toBe(0)
        expect(asked).toContain('POST /v1/orders/:order/charges')
        slow.release()
        expect((await first).status).toBe(201)
      })
    })

    it('refuses a waitMs that is not a whole number of milliseconds at start-up, naming it', async () => {
      await expect(withApp({ waitMs: -5 }, [counted('/v1/charges', async () => json(201, {}))], async () => {})).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining('waitMs') as unknown })
    })

    it('a first request that fails before any step releases the key: the waiter runs it, once', async () => {
      const flaky = held('/v1/charges', async (call) => {
        if (call === 1) throw new Error('boom before any step')
        return json(201, { id: `ch_${call}` })
      })
      await withApp({ waitMs: 600_000 }, [flaky.route], async (app, { watch }) => {
        const key = randomUUID()
        const first = app.request(post('/v1/charges', key))
        await flaky.started
        const duplicate = app.request(post('/v1/charges', key))
        await watch.firstRead.promise
        flaky.release()
        const [a, b] = await Promise.all([first, duplicate])
        expect(a.status).toBe(500)
        expect([b.status, b.body.toString(), b.headers.get('idempotent-replayed')]).toEqual([201, '{"id":"ch_2"}', null])
        expect(flaky.route.calls).toBe(2)
        const third = await app.request(post('/v1/charges', key))
        expect([third.status, third.body.toString(), third.headers.get('idempotent-replayed')]).toEqual([201, '{"id":"ch_2"}', 'true'])
      })
    })

    it('20 duplicates at once: one execution, the 19 others wait and replay it', async () => {
      const width = 20
      const slow = held('/v1/charges')
      await withApp({ waitMs: 600_000 }, [slow.route], async (app, { claimsAnswered }) => {
        const key = randomUUID()
        const all = Array.from({ length: width }, () => app.request(post('/v1/charges', key)))
        // Every claim answered: one owns the key and is held, the 19 others are waiting.
        await claimsAnswered(width)
        slow.release()
        const responses = await Promise.all(all)
        expect(slow.route.calls).toBe(1)
        expect(responses.map((response) => response.status)).toEqual(Array.from({ length: width }, () => 201))
        expect(responses.filter((response) => response.headers.get('idempotent-replayed') === 'true')).toHaveLength(width - 1)
        expect(new Set(responses.map((response) => response.body.toString()))).toEqual(new Set(['{"id":"ch_1"}']))
      })
    })

    it('a waiter is woken by the completion (LISTEN/NOTIFY), long before its next read, and reads once', async () => {
      const slow = held('/v1/charges')
      await withApp(
        { waitMs: 600_000 },
        [slow.route],
        async (app, { watch }) => {
          const key = randomUUID()
          const first = app.request(post('/v1/charges', key))
          await slow.started
          const waitingSince = performance.now()
          const duplicate = app.request(post('/v1/charges', key))
          await until(() => watch.live.some((watching) => watching.live), 'the waiter to watch the claim')
          expect(watch.reads).toBe(0)
          slow.release()
          const [a, b] = await Promise.all([first, duplicate])
          expect([a.status, b.status, b.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true'])
          // Its first read was due half a minute after it began waiting, at the earliest.
          expect(performance.now() - waitingSince).toBeLessThan(LONG_POLL.waitFirstPollMs / 2)
          expect(watch.reads).toBe(1)
          expect(watch.watching).toBe(0)
        },
        LONG_POLL,
      )
    })

    it('a waiter whose client closes its connection stops waiting: answered as a conflict, its watch and the LISTEN connection let go', async () => {
      const slow = held('/v1/charges')
      const events: OutcomeEvent[] = []
      const conflict = deferred()
      const onOutcome = (event: OutcomeEvent) => {
        events.push(event)
        if (event.outcome === 'conflict') conflict.resolve()
      }
      await withApp(
        { waitMs: 600_000, onOutcome },
        [slow.route],
        async (app, { watch }) => {
          const key = randomUUID()
          const first = app.request(post('/v1/charges', key))
          await slow.started
          const client = new AbortController()
          const duplicate = app.request(post('/v1/charges', key, client.signal)).catch((error: unknown) => error)
          await until(() => watch.live.some((watching) => watching.live), 'the waiter to watch the claim')
          client.abort()
          await conflict.promise
          await duplicate
          expect(watch.watching).toBe(0)
          const readsAfter = watch.reads
          // Nothing left running for it: no connection out of the pool once the LISTEN one lingered out.
          await until(() => inUse() === 0, 'the LISTEN connection to go back to the pool')
          slow.release()
          expect((await first).status).toBe(201)
          expect(watch.reads).toBe(readsAfter)
          expect(events.map((event) => event.outcome).sort()).toEqual(['conflict', 'created'])
        },
        LONG_POLL,
      )
    })
  })
}
