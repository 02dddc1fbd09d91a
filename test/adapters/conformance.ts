import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { OutcomeEvent } from '../../src/adapters/http.js'
import { createEngine, type Engine } from '../../src/engine/engine.js'
import { isOncelyError } from '../../src/errors.js'
import { logKey } from '../../src/logger.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import pg from 'pg'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { startTcpProxy } from '../helpers/tcp-proxy.js'
import { waitConformance } from './conformance-wait.js'
import type { AdapterHarness, AppUnderTest, HandlerInput, HandlerOutput, TestOptions, TestRequest, TestRoute } from './harness.js'

const JSON_TYPE = 'application/json; charset=utf-8'
const user = (id: number) => ({ authorization: `Bearer demo_${id}` })
const scopeFromBearer = (authorization: string | undefined) => /^Bearer demo_([1-9]\d*)$/.exec(authorization ?? '')?.[1]

/** A JSON body as a handler writes it: its key order is not the one a jsonb column would keep. */
const json = (status: number, body: object, headers: Record<string, string> = {}): HandlerOutput => ({
  status,
  headers: { 'content-type': JSON_TYPE, ...headers },
  body: JSON.stringify(body),
})

interface Problem {
  type: string
  title: string
  status: number
  detail: string
  instance: string
  retryable: boolean
  retry_same_key: boolean
  new_key_safe: boolean
  operation_state: string
  key_ttl_seconds?: number
  idempotency_key?: string
  result_status?: number
}

/** The engine's default ttlMs (24 h) in seconds: what guarded routes advertise. */
const TTL_SECONDS = '86400'
const OPERATION_STATES = ['none', 'running', 'suspended', 'completed', 'failed', 'unknown']

/** A route whose handler counts its calls. */
function counted(method: TestRoute['method'], path: string, handler: (input: HandlerInput, call: number) => Promise<HandlerOutput>) {
  const route = { method, path, calls: 0, handler: async (input: HandlerInput) => handler(input, ++route.calls) }
  return route
}

/** The conformance table every adapter passes: the same routes, requests and answers. */
export function conformanceSuite(harness: AdapterHarness): void {
  describe(`${harness.name} adapter conformance`, () => {
    let db: TestDatabase
    let engine: Engine<Queryable>
    let table: string
    beforeAll(async () => {
      db = await createTestDatabase()
      engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 30_000 })
      table = `"${db.schema.replaceAll('"', '""')}".idempotency_key`
      await db.pool.query('CREATE TABLE adapter_charges (id text PRIMARY KEY)')
    })
    afterAll(async () => {
      await db.close()
    })

    async function withApp(options: Partial<TestOptions>, routes: TestRoute[], test: (app: AppUnderTest) => Promise<void>): Promise<void> {
      const app = await harness.start({ engine, scope: scopeFromBearer, log: () => {}, ...options }, routes)
      try {
        await test(app)
      } finally {
        await app.close()
      }
    }
    const post = (path: string, key: string | undefined, body: object | string, headers: Record<string, string> = user(1)): TestRequest => ({
      method: 'POST',
      path,
      body,
      headers: { ...headers, ...(key === undefined ? {} : { 'idempotency-key': key }) },
    })
    const rowCount = async (scope: string) =>
      (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table} WHERE scope = $1`, [scope])).rows[0]?.n
    const problemOf = (response: { headers: Headers; body: Buffer }) => {
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/)
      const body = JSON.parse(response.body.toString('utf8')) as Problem
      expect(body.instance).toMatch(/^urn:uuid:[0-9a-f-]{36}$/)
      expect(typeof body.retryable).toBe('boolean')
      // Issue 23: every problem says what is safe, and how long the key lives.
      expect(typeof body.retry_same_key).toBe('boolean')
      expect(typeof body.new_key_safe).toBe('boolean')
      expect(OPERATION_STATES).toContain(body.operation_state)
      expect(String(body.key_ttl_seconds)).toBe(TTL_SECONDS)
      expect(response.headers.get('idempotency-key-ttl')).toBe(TTL_SECONDS)
      return body
    }

    it('executes a first request once, then replays status, headers and body bytes verbatim', async () => {
      const events: OutcomeEvent[] = []
      const charges = counted('POST', '/v1/orders/:order/charges', async ({ params }, call) =>
        json(201, { zeta: 'last', id: `ch_${call}`, alpha: { b: 1, a: [3, 1] }, order: params.order }, { 'x-charge-id': `ch_${call}`, location: `/v1/charges/ch_${call}` }),
      )
      await withApp({ onOutcome: (event) => events.push(event) }, [charges], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/orders/o1/charges', key, { amount: 1000, currency: 'usd' }))
        expect(first.status).toBe(201)
        expect(first.headers.get('idempotent-replayed')).toBeNull()
        const again = await app.request(post('/v1/orders/o1/charges', key, { amount: 1000, currency: 'usd' }))
        expect(again.status).toBe(201)
        expect(again.body.equals(first.body)).toBe(true)
        expect(again.body.toString()).toBe('{"zeta":"last","id":"ch_1","alpha":{"b":1,"a":[3,1]},"order":"o1"}')
        expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'))
        expect(again.headers.get('x-charge-id')).toBe('ch_1')
        expect(again.headers.get('location')).toBe('/v1/charges/ch_1')
        expect(again.headers.get('idempotent-replayed')).toBe('true')
        expect(charges.calls).toBe(1)
        expect(events.map((event) => [event.outcome, event.status])).toEqual([['created', 201], ['replayed', 201]])
      })
    })

    it('replays a non-JSON body byte for byte with its content type', async () => {
      const bytes = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff, 0xfe, 0x0d, 0x0a])
      const image = counted('POST', '/v1/images', async () => ({ status: 200, headers: { 'content-type': 'image/png' }, body: bytes }))
      await withApp({}, [image], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/images', key, { size: 1 }))
        const again = await app.request(post('/v1/images', key, { size: 1 }))
        expect([first.status, again.status]).toEqual([200, 200])
        expect(Buffer.from(bytes).equals(first.body) && Buffer.from(bytes).equals(again.body)).toBe(true)
        expect(again.headers.get('content-type')).toBe('image/png')
        expect(again.headers.get('idempotent-replayed')).toBe('true')
        expect(image.calls).toBe(1)
      })
    })

    it('answers 409 with Retry-After while the first request is held, then replays it', async () => {
      const started = deferred()
      const release = deferred()
      const slow = counted('POST', '/v1/charges', async () => {
        started.resolve()
        await release.promise
        return json(201, { id: 'ch_slow' })
      })
      const events: OutcomeEvent[] = []
      await withApp({ onOutcome: (event) => events.push(event) }, [slow], async (app) => {
        const key = randomUUID()
        const first = app.request(post('/v1/charges', key, { amount: 1 }))
        await started.promise
        const second = await app.request(post('/v1/charges', key, { amount: 1 }))
        expect(second.status).toBe(409)
        expect(second.headers.get('retry-after')).toMatch(/^\d+$/)
        expect(problemOf(second)).toMatchObject({
          type: 'https://oncely.dev/problems/idempotency-key-in-use',
          status: 409,
          retry_same_key: true,
          new_key_safe: false,
          operation_state: 'running',
        })
        release.resolve()
        expect((await first).status).toBe(201)
        const third = await app.request(post('/v1/charges', key, { amount: 1 }))
        expect([third.status, third.headers.get('idempotent-replayed')]).toEqual([201, 'true'])
        expect(slow.calls).toBe(1)
        expect(events.map((event) => event.outcome)).toEqual(['conflict', 'created', 'replayed'])
      })
    })

    it('answers 422 to the same key with a different payload, and a replay to the same payload written differently', async () => {
      const charges = counted('POST', '/v1/charges', async (_input, call) => json(201, { id: `ch_${call}` }))
      await withApp({}, [charges], async (app) => {
        const key = randomUUID()
        expect((await app.request(post('/v1/charges', key, '{"amount":1000,"currency":"usd","meta":{"a":1,"b":2}}'))).status).toBe(201)
        const reordered = await app.request(post('/v1/charges', key, ' { "meta" : {"b":2, "a":1.0},\n "currency":"usd", "amount": 1000 } '))
        expect([reordered.status, reordered.headers.get('idempotent-replayed')]).toEqual([201, 'true'])
        const different = await app.request(post('/v1/charges', key, { amount: 2000, currency: 'usd', meta: { a: 1, b: 2 } }))
        expect(different.status).toBe(422)
        expect(problemOf(different)).toMatchObject({
          type: 'https://oncely.dev/problems/idempotency-key-reused',
          status: 422,
          retryable: false,
          idempotency_key: key,
          retry_same_key: false,
          new_key_safe: false,
          operation_state: 'completed',
        })
        expect(charges.calls).toBe(1)
      })
    })

    it('answers 400 to a missing or malformed key, stores nothing and never calls the handler', async () => {
      const charges = counted('POST', '/v1/charges', async () => json(201, { ok: true }))
      await withApp({}, [charges], async (app) => {
        const missing = await app.request(post('/v1/charges', undefined, { amount: 1 }, user(7)))
        expect(missing.status).toBe(400)
        expect(problemOf(missing)).toMatchObject({
          type: 'https://oncely.dev/problems/idempotency-key-missing',
          status: 400,
          retryable: false,
          retry_same_key: false,
          new_key_safe: true,
          operation_state: 'none',
        })
        const tooLong = await app.request(post('/v1/charges', 'k'.repeat(256), { amount: 1 }, user(7)))
        expect(tooLong.status).toBe(400)
        expect(problemOf(tooLong)).toMatchObject({ type: 'https://oncely.dev/problems/idempotency-key-invalid', status: 400, idempotency_key: 'k'.repeat(256) })
        const badQuoting = await app.request(post('/v1/charges', '"a"b"', { amount: 1 }, user(7)))
        expect(problemOf(badQuoting)).toMatchObject({ type: 'https://oncely.dev/problems/idempotency-key-invalid', status: 400 })
        // Half-quoted: a quoted key cut short, refused like any malformed key (issue 24).
        for (const half of ['"abc', 'abc"', '"']) {
          const answer = await app.request(post('/v1/charges', half, { amount: 1 }, user(7)))
          expect(problemOf(answer), half).toMatchObject({ type: 'https://oncely.dev/problems/idempotency-key-invalid', status: 400 })
        }
        expect(charges.calls).toBe(0)
        expect(await rowCount('7')).toBe(0)
        const quotedKey = randomUUID()
        expect((await app.request(post('/v1/charges', `"${quotedKey}"`, { amount: 1 }, user(7)))).status).toBe(201)
        const unquoted = await app.request(post('/v1/charges', quotedKey, { amount: 1 }, user(7)))
        expect(unquoted.headers.get('idempotent-replayed')).toBe('true')
      })
    })

    it('scopes keys per user: the same key from two users is two operations', async () => {
      const charges = counted('POST', '/v1/charges', async (_input, call) => json(201, { id: `ch_${call}` }))
      await withApp({}, [charges], async (app) => {
        const key = randomUUID()
        const a = await app.request(post('/v1/charges', key, { amount: 1 }, user(11)))
        const b = await app.request(post('/v1/charges', key, { amount: 1 }, user(12)))
        expect([a.body.toString(), b.body.toString()]).toEqual(['{"id":"ch_1"}', '{"id":"ch_2"}'])
        const replayA = await app.request(post('/v1/charges', key, { amount: 1 }, user(11)))
        const replayB = await app.request(post('/v1/charges', key, { amount: 1 }, user(12)))
        expect([replayA.body.toString(), replayB.body.toString()]).toEqual(['{"id":"ch_1"}', '{"id":"ch_2"}'])
        expect(charges.calls).toBe(2)
      })
    })

    it('answers 401 when the scope resolves to undefined', async () => {
      const charges = counted('POST', '/v1/charges', async () => json(201, {}))
      await withApp({}, [charges], async (app) => {
        const response = await app.request(post('/v1/charges', randomUUID(), { amount: 1 }, { authorization: 'Bearer nobody' }))
        expect(response.status).toBe(401)
        expect(problemOf(response)).toMatchObject({ type: 'https://oncely.dev/problems/unauthenticated', status: 401, retry_same_key: false, new_key_safe: true, operation_state: 'none' })
        expect(charges.calls).toBe(0)
      })
    })

    it('refuses to start without a scope, unless scope is global', async () => {
      const charges = counted('POST', '/v1/charges', async () => json(201, {}))
      const error: unknown = await harness.start({ engine }, [charges]).then(
        async (app) => app.close(),
        (e: unknown) => e,
      )
      expect(isOncelyError(error, 'ONCELY_INVALID_OPTION')).toBe(true)
      expect((error as Error).message).toMatch(/scope/)
      await withApp({ scope: 'global' }, [charges], async (app) => {
        const key = randomUUID()
        expect((await app.request(post('/v1/charges', key, {}, {}))).status).toBe(201)
        expect((await app.request(post('/v1/charges', key, {}, {}))).headers.get('idempotent-replayed')).toBe('true')
        expect(await rowCount('global')).toBe(1)
      })
    })

    it('records an outcome above maxStoredBodyBytes as result-unavailable: the first caller gets it, a retry a 500 problem, never a second run', async () => {
      const lines: string[] = []
      const id = `ch_${randomUUID()}`
      const bigBody = 'x'.repeat(2 * 1024 * 1024)
      const big = counted('POST', '/v1/exports', async ({ idempotency }) => {
        idempotency!.writeOnCompletion(async (tx) => {
          await tx.query({ text: 'INSERT INTO adapter_charges (id) VALUES ($1)', values: [id] })
        })
        return { status: 200, headers: { 'content-type': 'text/plain' }, body: bigBody }
      })
      await withApp({ log: (line) => lines.push(line) }, [big], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/exports', key, {}))
        expect([first.status, first.body.length, first.headers.get('idempotency-key-ttl')]).toEqual([200, bigBody.length, TTL_SECONDS])
        // Invariant 8: the operation is recorded as done, so its business rows commit with it.
        expect((await db.pool.query('SELECT 1 FROM adapter_charges WHERE id = $1', [id])).rowCount).toBe(1)
        const again = await app.request(post('/v1/exports', key, {}))
        expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([500, 'true'])
        const body = problemOf(again)
        expect(body).toMatchObject({
          type: 'https://oncely.dev/problems/result-unavailable',
          status: 500,
          retryable: false,
          retry_same_key: false,
          new_key_safe: false,
          operation_state: 'completed',
          result_status: 200,
        })
        expect(body.detail).toContain('maxStoredBodyBytes')
        expect(lines.some((line) => line.includes('maxStoredBodyBytes') && line.includes(body.instance))).toBe(true)
        const third = await app.request(post('/v1/exports', key, {}))
        expect(third.body.equals(again.body)).toBe(true)
        expect(big.calls).toBe(1)
      })
    })

    it('advertises the key TTL on first answers, replays, problems and unkeyed answers, stores none of it, and sends none with keyTtlHeader: false', async () => {
      const charges = counted('POST', '/v1/charges', async (_input, call) => json(201, { id: `ch_${call}` }))
      await withApp({ required: false }, [charges], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/charges', key, { amount: 1 }))
        const replay = await app.request(post('/v1/charges', key, { amount: 1 }))
        const mismatch = await app.request(post('/v1/charges', key, { amount: 2 }))
        const keyless = await app.request(post('/v1/charges', undefined, { amount: 1 }))
        expect([first, replay, mismatch, keyless].map((response) => [response.status, response.headers.get('idempotency-key-ttl')])).toEqual([
          [201, TTL_SECONDS],
          [201, TTL_SECONDS],
          [422, TTL_SECONDS],
          [201, TTL_SECONDS],
        ])
        const stored = await db.pool.query<{ response_headers: unknown }>(`SELECT response_headers FROM ${table} WHERE scope = '1' AND key = $1`, [key])
        expect(JSON.stringify(stored.rows[0]?.response_headers)).toContain('content-type')
        expect(JSON.stringify(stored.rows[0]?.response_headers)).not.toContain('idempotency-key-ttl')
      })
      await withApp({ keyTtlHeader: false }, [charges], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/charges', key, { amount: 1 }))
        const replay = await app.request(post('/v1/charges', key, { amount: 1 }))
        const mismatch = await app.request(post('/v1/charges', key, { amount: 2 }))
        expect([first, replay, mismatch].map((response) => response.headers.get('idempotency-key-ttl'))).toEqual([null, null, null])
        const body = JSON.parse(mismatch.body.toString()) as Problem
        expect([body.key_ttl_seconds, body.new_key_safe]).toEqual([undefined, false])
      })
    })

    it('releases the key on a 4xx before any step: the same key with a corrected body succeeds', async () => {
      const charges = counted('POST', '/v1/charges', async ({ body }) =>
        (body as { amount: number }).amount > 0 ? json(201, { ok: true }) : json(400, { error: 'amount must be positive' }),
      )
      await withApp({}, [charges], async (app) => {
        const key = randomUUID()
        expect((await app.request(post('/v1/charges', key, { amount: 0 }))).status).toBe(400)
        const corrected = await app.request(post('/v1/charges', key, { amount: 5 }))
        expect([corrected.status, corrected.headers.get('idempotent-replayed')]).toEqual([201, null])
      })
    })

    it('suspends on a 5xx after a step: the retry resumes with the same step key and skips committed steps', async () => {
      const authorizations: string[] = []
      const captures: string[] = []
      const charges = counted('POST', '/v1/charges', async ({ idempotency }) => {
        const execution = idempotency!.execution
        await execution.step('authorize', ({ providerKey }) => void authorizations.push(providerKey))
        try {
          await execution.step('capture', ({ providerKey }) => {
            captures.push(providerKey)
            if (captures.length === 1) throw new Error('provider unavailable')
            return { captured: true }
          })
        } catch {
          return json(503, { error: 'provider unavailable' }, { 'retry-after': '1' })
        }
        return json(201, { captured: true })
      })
      await withApp({}, [charges], async (app) => {
        const key = randomUUID()
        expect((await app.request(post('/v1/charges', key, { amount: 1 }))).status).toBe(503)
        expect((await app.request(post('/v1/charges', key, { amount: 1 }))).status).toBe(201)
        expect(authorizations).toHaveLength(1)
        expect(captures).toHaveLength(2)
        expect(captures[1]).toBe(captures[0])
        expect((await app.request(post('/v1/charges', key, { amount: 1 }))).headers.get('idempotent-replayed')).toBe('true')
      })
    })

    it('stores a 4xx after a step and replays it (a declined card)', async () => {
      const charges = counted('POST', '/v1/charges', async ({ idempotency }) => {
        await idempotency!.execution.step('charge', () => ({ declined: true }))
        return json(402, { error: 'card_declined' })
      })
      await withApp({}, [charges], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/charges', key, { amount: 1 }))
        const again = await app.request(post('/v1/charges', key, { amount: 1 }))
        expect([first.status, again.status, again.headers.get('idempotent-replayed')]).toEqual([402, 402, 'true'])
        expect(again.body.equals(first.body)).toBe(true)
        expect(charges.calls).toBe(1)
      })
    })

    it('commits writeOnCompletion rows with the completion', async () => {
      const id = `ch_${randomUUID()}`
      const charges = counted('POST', '/v1/charges', async ({ idempotency }) => {
        idempotency!.writeOnCompletion(async (tx) => {
          await tx.query({ text: 'INSERT INTO adapter_charges (id) VALUES ($1)', values: [id] })
        })
        return json(201, { id })
      })
      await withApp({}, [charges], async (app) => {
        expect((await app.request(post('/v1/charges', randomUUID(), { amount: 1 }))).status).toBe(201)
        expect((await db.pool.query('SELECT 1 FROM adapter_charges WHERE id = $1', [id])).rowCount).toBe(1)
      })
    })

    it('commits writeOnCompletion statements with the completion, and statements among functions in their turn', async () => {
      const [flown, first, second] = [`ch_${randomUUID()}`, `ch_${randomUUID()}`, `ch_${randomUUID()}`]
      const insert = (id: string) => ({ text: 'INSERT INTO adapter_charges (id) VALUES ($1)', values: [id] })
      const statements = counted('POST', '/v1/charges', async ({ idempotency }) => {
        idempotency!.writeOnCompletion(insert(flown))
        return json(201, { id: flown })
      })
      // The statement's row must exist when the function after it runs: registration order holds.
      const mixed = counted('POST', '/v1/refunds', async ({ idempotency }) => {
        idempotency!.writeOnCompletion(insert(first))
        idempotency!.writeOnCompletion(async (tx) => {
          await tx.query({ text: "INSERT INTO adapter_charges (id) SELECT $1 || '_after' FROM adapter_charges WHERE id = $1", values: [first] })
        })
        idempotency!.writeOnCompletion(insert(second))
        return json(201, { id: first })
      })
      await withApp({}, [statements, mixed], async (app) => {
        expect((await app.request(post('/v1/charges', randomUUID(), { amount: 1 }))).status).toBe(201)
        expect((await app.request(post('/v1/refunds', randomUUID(), { amount: 1 }))).status).toBe(201)
        const { rows } = await db.pool.query<{ id: string }>('SELECT id FROM adapter_charges WHERE id = ANY($1) ORDER BY id', [[flown, first, `${first}_after`, second]])
        expect(rows.map((row) => row.id).sort()).toEqual([flown, first, `${first}_after`, second].sort())
      })
    })

    for (const given of ['a function', 'a statement'] as const) {
      it(`rolls writeOnCompletion rows back and answers 409 when the completion lost its fence (written by ${given})`, async () => {
        const id = `ch_${randomUUID()}`
        const started = deferred()
        const release = deferred()
        const insert = { text: 'INSERT INTO adapter_charges (id) VALUES ($1)', values: [id] }
        const charges = counted('POST', '/v1/charges', async ({ idempotency }) => {
          idempotency!.writeOnCompletion(given === 'a statement' ? insert : async (tx) => void (await tx.query(insert)))
          started.resolve()
          await release.promise
          return json(201, { id })
        })
        await withApp({}, [charges], async (app) => {
          const key = randomUUID()
          const pending = app.request(post('/v1/charges', key, { amount: 1 }))
          await started.promise
          // Another worker took the claim over: the fence token changed under this one.
          await db.pool.query(`UPDATE ${table} SET fence_token = gen_random_uuid() WHERE scope = '1' AND key = $1`, [key])
          release.resolve()
          const response = await pending
          expect(response.status).toBe(409)
          expect(problemOf(response).type).toBe('https://oncely.dev/problems/idempotency-key-in-use')
          expect((await db.pool.query('SELECT 1 FROM adapter_charges WHERE id = $1', [id])).rowCount).toBe(0)
        })
      })
    }

    // Issue 23: a streamed response goes to the first caller as it is written, and its outcome is
    // recorded all the same, so a retry never runs the handler a second time.
    it('passes a streamed response through, stores it whole within maxStoredBodyBytes and replays it byte for byte', async () => {
      const events: OutcomeEvent[] = []
      const pieces = ['{"id":"ch_1",', '"parts":[', '1,2]}']
      const streaming = counted('POST', '/v1/stream', async () => ({ status: 201, headers: { 'content-type': 'application/json', 'x-charge-id': 'ch_1' }, stream: pieces }))
      await withApp({ onOutcome: (event) => events.push(event) }, [streaming], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/stream', key, {}))
        expect([first.status, first.body.toString(), first.headers.get('idempotent-replayed')]).toEqual([201, pieces.join(''), null])
        const again = await app.request(post('/v1/stream', key, {}))
        expect(again.status).toBe(201)
        expect(again.body.equals(first.body)).toBe(true)
        expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'))
        expect(again.headers.get('x-charge-id')).toBe('ch_1')
        expect(again.headers.get('idempotent-replayed')).toBe('true')
        expect(streaming.calls).toBe(1)
        expect(events.map((event) => [event.outcome, event.status])).toEqual([['created', 201], ['replayed', 201]])
      })
    })

    it('passes a streamed response over maxStoredBodyBytes through whole; a retry gets result-unavailable, never a second run', async () => {
      const lines: string[] = []
      const pieces = ['0123456789', 'abcdef', 'ghij']
      const streaming = counted('POST', '/v1/stream', async () => ({ status: 200, headers: { 'content-type': 'text/plain' }, stream: pieces }))
      await withApp({ log: (line) => lines.push(line), maxStoredBodyBytes: 10 }, [streaming], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/stream', key, {}))
        expect([first.status, first.body.toString()]).toEqual([200, pieces.join('')])
        const retry = await app.request(post('/v1/stream', key, {}))
        expect(retry.status).toBe(500)
        expect(retry.headers.get('idempotent-replayed')).toBe('true')
        const body = problemOf(retry)
        expect(body).toMatchObject({
          type: 'https://oncely.dev/problems/result-unavailable',
          result_status: 200,
          retry_same_key: false,
          new_key_safe: false,
          operation_state: 'completed',
        })
        expect(body.detail).toContain('streamed 20 bytes, more than maxStoredBodyBytes (10)')
        expect(streaming.calls).toBe(1)
        expect(lines.filter((line) => line.includes('ONCELY_RESPONSE_NOT_REPLAYABLE') && line.includes(body.instance))).toHaveLength(1)
      })
    })

    it('records a streamed response cut by an error mid-way as result-unavailable: the key is not released and the handler never runs again', async () => {
      const recorded = deferred()
      const streaming = counted('POST', '/v1/stream', async () => ({ status: 200, headers: { 'content-type': 'text/plain' }, stream: ['partial '], streamError: 'the upstream went away' }))
      await withApp({ onOutcome: () => recorded.resolve() }, [streaming], async (app) => {
        const key = randomUUID()
        // A signal sends the request over a real connection in every harness, so the cut is real.
        const first = await app.request({ ...post('/v1/stream', key, {}), signal: new AbortController().signal }).then(
          (response) => response,
          (error: unknown) => error,
        )
        // The client never gets a whole response: the connection is cut under it.
        expect(first).toBeInstanceOf(Error)
        await recorded.promise
        const retry = await app.request(post('/v1/stream', key, {}))
        expect(retry.status).toBe(500)
        expect(problemOf(retry)).toMatchObject({ type: 'https://oncely.dev/problems/result-unavailable', result_status: 200, new_key_safe: false, operation_state: 'completed' })
        expect(streaming.calls).toBe(1)
        expect((await db.pool.query<{ status: string }>(`SELECT status FROM ${table} WHERE key = $1`, [key])).rows).toEqual([{ status: 'completed' }])
      })
    })

    it('releases the key when the handler throws before a step', async () => {
      const flaky = counted('POST', '/v1/charges', async (_input, call) => {
        if (call === 1) throw new Error('boom')
        return json(201, { ok: true })
      })
      await withApp({}, [flaky], async (app) => {
        const key = randomUUID()
        expect((await app.request(post('/v1/charges', key, { amount: 1 }))).status).toBe(500)
        expect((await app.request(post('/v1/charges', key, { amount: 1 }))).status).toBe(201)
        expect(flaky.calls).toBe(2)
      })
    })

    it('reports mismatch and invalid to onOutcome', async () => {
      const events: OutcomeEvent[] = []
      const charges = counted('POST', '/v1/charges', async () => json(201, {}))
      await withApp({ onOutcome: (event) => events.push(event) }, [charges], async (app) => {
        const key = randomUUID()
        await app.request(post('/v1/charges', undefined, { amount: 1 }))
        await app.request(post('/v1/charges', key, { amount: 1 }))
        await app.request(post('/v1/charges', key, { amount: 2 }))
        await app.request(post('/v1/charges', key, { amount: 1 }))
        expect(events.map((event) => [event.outcome, event.status])).toEqual([['invalid', 400], ['created', 201], ['mismatch', 422], ['replayed', 201]])
        expect(events.every((event) => event.durationMs >= 0)).toBe(true)
        // The engine's decisions carry who sent what (issue 21: the repeated-payload detector reads
        // the guard's fingerprint instead of hashing the body again); a refusal before it, nothing.
        const [invalid, created, mismatch, replayed] = events
        expect(invalid).not.toHaveProperty('fingerprint')
        expect(created).toMatchObject({ key, scope: expect.any(String) as unknown, fingerprint: expect.stringMatching(/^v\d+:[0-9a-f]{64}(;v\d+:[0-9a-f]{64})*$/) as unknown })
        expect(replayed).toMatchObject({ key, scope: created?.scope, fingerprint: created?.fingerprint })
        expect(mismatch).toMatchObject({ key, scope: created?.scope })
        expect(mismatch?.fingerprint).not.toBe(created?.fingerprint)
      })
    })

    it('refuses bad options at start-up, naming the option', async () => {
      const charges = counted('POST', '/v1/charges', async () => json(201, {}))
      for (const [bad, name] of [
        [{ methods: 'POST' }, 'methods'],
        [{ maxStoredBodyBytes: -1 }, 'maxStoredBodyBytes'],
        [{ query: [1] }, 'query'],
        [{ engine: {} }, 'engine'],
      ] as const) {
        const error: unknown = await harness.start({ engine, scope: scopeFromBearer, ...bad } as unknown as TestOptions, [charges]).then(
          async (app) => app.close(),
          (e: unknown) => e,
        )
        expect(isOncelyError(error, 'ONCELY_INVALID_OPTION')).toBe(true)
        expect((error as Error).message).toContain(`option ${name} `)
      }
    })

    it('stores content and custom headers but not cookies, date or hop-by-hop headers', async () => {
      const charges = counted('POST', '/v1/charges', async () =>
        json(201, { ok: true }, { 'set-cookie': 'session=abc', 'x-request-cost': '3', 'cache-control': 'no-store', 'content-language': 'en' }),
      )
      await withApp({}, [charges], async (app) => {
        const key = randomUUID()
        expect((await app.request(post('/v1/charges', key, { amount: 1 }))).headers.get('set-cookie')).toBe('session=abc')
        const replay = await app.request(post('/v1/charges', key, { amount: 1 }))
        expect(replay.headers.get('set-cookie')).toBeNull()
        expect([replay.headers.get('x-request-cost'), replay.headers.get('cache-control'), replay.headers.get('content-language')]).toEqual(['3', 'no-store', 'en'])
        const { rows } = await db.pool.query<{ headers: Array<[string, string]> }>(`SELECT response_headers AS headers FROM ${table} WHERE scope = '1' AND key = $1`, [key])
        const names = (rows[0]?.headers ?? []).map(([name]) => name)
        expect(names).toContain('content-type')
        for (const name of ['set-cookie', 'date', 'content-length', 'connection', 'transfer-encoding']) expect(names).not.toContain(name)
      })
    })

    it('guards only the routes the routes option selects', async () => {
      const open = counted('POST', '/v1/open', async () => json(200, { open: true }))
      const closed = counted('POST', '/v1/charges/:id', async () => json(201, {}))
      const routes = (_method: string, path: string) => path !== '/v1/open'
      await withApp({ routes }, [open, closed], async (app) => {
        expect((await app.request(post('/v1/open', undefined, {}))).status).toBe(200)
        expect((await app.request(post('/v1/charges/c1', undefined, {}))).status).toBe(400)
      })
    })

    it('lets unguarded methods through without a key', async () => {
      const read = counted('GET', '/v1/charges/:id', async ({ params, idempotency }) => json(200, { id: params.id, guarded: idempotency !== undefined }))
      await withApp({}, [read], async (app) => {
        const response = await app.request({ method: 'GET', path: '/v1/charges/ch_1', headers: user(1) })
        expect([response.status, response.body.toString()]).toEqual([200, '{"id":"ch_1","guarded":false}'])
      })
    })

    it('answers 400 to an unquoted key with a comma (two headers joined), and accepts a comma inside a quoted key', async () => {
      const charges = counted('POST', '/v1/charges', async (_input, call) => json(201, { id: `ch_${call}` }))
      await withApp({}, [charges], async (app) => {
        const a = randomUUID()
        const joined = await app.request(post('/v1/charges', `${a}, ${randomUUID()}`, { amount: 1 }))
        expect(joined.status).toBe(400)
        expect(problemOf(joined)).toMatchObject({ type: 'https://oncely.dev/problems/idempotency-key-invalid', retryable: false })
        expect(problemOf(joined).idempotency_key).toMatch(/, /)
        const quoted = `"${a}, b"`
        expect((await app.request(post('/v1/charges', quoted, { amount: 1 }))).status).toBe(201)
        const again = await app.request(post('/v1/charges', quoted, { amount: 1 }))
        expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([201, 'true'])
        expect(charges.calls).toBe(1)
      })
    })

    it('leaves the excludeBodyFields out of the fingerprint but not out of the body the handler sees', async () => {
      const seen: unknown[] = []
      const charges = counted('POST', '/v1/charges', async ({ body }, call) => {
        seen.push(body)
        return json(201, { id: `ch_${call}` })
      })
      await withApp({ excludeBodyFields: ['/client_ts', '/meta/nonce'] }, [charges], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/charges', key, { amount: 1, client_ts: 1, meta: { nonce: 'a', note: 'n' } }))
        const retry = await app.request(post('/v1/charges', key, { amount: 1, client_ts: 2, meta: { nonce: 'b', note: 'n' } }))
        expect([first.status, retry.status, retry.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true'])
        expect((await app.request(post('/v1/charges', key, { amount: 1, client_ts: 3, meta: { nonce: 'c', note: 'other' } }))).status).toBe(422)
        expect(seen).toEqual([{ amount: 1, client_ts: 1, meta: { nonce: 'a', note: 'n' } }])
      })
    })

    it('refuses excludeBodyFields that are not JSON Pointers at start-up', async () => {
      const charges = counted('POST', '/v1/charges', async () => json(201, {}))
      const error: unknown = await harness.start({ engine, scope: scopeFromBearer, excludeBodyFields: ['client_ts'] }, [charges]).then(
        async (app) => app.close(),
        (e: unknown) => e,
      )
      expect(isOncelyError(error, 'ONCELY_INVALID_OPTION')).toBe(true)
      expect((error as Error).message).toContain('option excludeBodyFields ')
    })

    it('with required: false, runs a keyless request unguarded and reports it as unkeyed; a keyed one is still guarded', async () => {
      const events: OutcomeEvent[] = []
      const charges = counted('POST', '/v1/charges', async ({ idempotency }, call) => json(201, { id: `ch_${call}`, guarded: idempotency !== undefined }))
      await withApp({ required: false, onOutcome: (event) => events.push(event) }, [charges], async (app) => {
        const keyless = await app.request(post('/v1/charges', undefined, { amount: 1 }, user(21)))
        expect([keyless.status, keyless.body.toString()]).toEqual([201, '{"id":"ch_1","guarded":false}'])
        expect(await rowCount('21')).toBe(0)
        const key = randomUUID()
        await app.request(post('/v1/charges', key, { amount: 1 }, user(21)))
        const replay = await app.request(post('/v1/charges', key, { amount: 1 }, user(21)))
        expect([replay.body.toString(), replay.headers.get('idempotent-replayed')]).toEqual(['{"id":"ch_2","guarded":true}', 'true'])
        await expect.poll(() => events.map((event) => [event.outcome, event.status])).toEqual([['unkeyed', 201], ['created', 201], ['replayed', 201]])
        expect((await app.request(post('/v1/charges', '', { amount: 1 }, user(21)))).status).toBe(400)
      })
    })

    it('sends X-Idempotent-Replayed as well on a replay when xIdempotentReplayed is set, and never stores either mark', async () => {
      const charges = counted('POST', '/v1/charges', async () => json(201, { ok: true }))
      await withApp({ xIdempotentReplayed: true }, [charges], async (app) => {
        const key = randomUUID()
        const first = await app.request(post('/v1/charges', key, { amount: 1 }))
        expect(first.headers.get('x-idempotent-replayed')).toBeNull()
        const replay = await app.request(post('/v1/charges', key, { amount: 1 }))
        expect([replay.headers.get('idempotent-replayed'), replay.headers.get('x-idempotent-replayed')]).toEqual(['true', 'true'])
        const again = await app.request(post('/v1/charges', key, { amount: 1 }))
        expect(again.headers.get('x-idempotent-replayed')).toBe('true')
      })
    })

    /** A charge route whose completion fails the same way every time: its charge row already exists. */
    async function chargeWhoseCompletionAlwaysFails() {
      const taken = `ch_${randomUUID()}`
      await db.pool.query('INSERT INTO adapter_charges (id) VALUES ($1)', [taken])
      const charges = counted('POST', '/v1/charges', async ({ idempotency }) => {
        await idempotency!.execution.step('charge', () => ({ id: taken }))
        idempotency!.writeOnCompletion(async (tx) => {
          await tx.query({ text: 'INSERT INTO adapter_charges (id) VALUES ($1)', values: [taken] })
        })
        return json(201, { id: taken })
      })
      return { charges }
    }

    // Issue 8 path 15: the engine throws ONCELY_OUTCOME_NOT_RECORDED for a deterministic failure.
    it('answers a completion that fails the same way every time with a non-retryable 500, without Retry-After', async () => {
      const lines: string[] = []
      const { charges } = await chargeWhoseCompletionAlwaysFails()
      await withApp({ log: (line) => lines.push(line) }, [charges], async (app) => {
        const key = randomUUID()
        const response = await app.request(post('/v1/charges', key, { amount: 1 }))
        expect(response.status).toBe(500)
        expect(response.headers.get('retry-after')).toBeNull()
        const body = problemOf(response)
        expect(body).toMatchObject({ type: 'https://oncely.dev/problems/outcome-not-recorded', retryable: false, retry_same_key: false, new_key_safe: false, operation_state: 'suspended' })
        expect(lines.some((line) => line.includes('ONCELY_OUTCOME_NOT_RECORDED') && line.includes(body.instance))).toBe(true)
      })
    })

    it('logs a pino-style logger scope, hashed key, route, code and instance as fields, a line function the same as text, and never the key, the Authorization header or a cookie', async () => {
      const { charges } = await chargeWhoseCompletionAlwaysFails()
      const secrets = { authorization: 'Bearer demo_77', cookie: 'session=cookie-secret-7f3a; theme=dark' }
      const records: Array<{ level: string; fields: Record<string, unknown>; message: string }> = []
      const record = (level: string) => (fields: Record<string, unknown>, message: string) => void records.push({ level, fields, message })
      const logger = { info: record('info'), warn: record('warn'), error: record('error') }
      const lines: string[] = []
      for (const log of [logger, (line: string) => void lines.push(line)]) {
        await withApp({ log }, [charges], async (app) => {
          // A key that is itself a secret (some clients use a token as the key): never logged as is.
          const key = `tok_${randomUUID()}`
          const response = await app.request(post('/v1/charges', key, { amount: 1 }, secrets))
          expect(response.status).toBe(500)
          const { instance } = problemOf(response)
          const logged = log === logger ? JSON.stringify(records) : lines.join('\n')
          for (const secret of [key, 'demo_77', 'Bearer', 'cookie-secret-7f3a', 'theme=dark']) expect(logged).not.toContain(secret)
          if (log === logger) {
            expect(records.find((r) => r.fields.code === 'ONCELY_OUTCOME_NOT_RECORDED')).toMatchObject({
              level: 'error',
              fields: { scope: '77', key: logKey(key), route: 'POST /v1/charges', code: 'ONCELY_OUTCOME_NOT_RECORDED', instance },
            })
            expect(logKey(key)).toMatch(/^[0-9a-f]{16}$/)
          } else {
            expect(lines.find((line) => line.includes(instance))).toMatch(
              new RegExp(`^error: oncely: .* route="POST /v1/charges" scope=77 key=${logKey(key)} code=ONCELY_OUTCOME_NOT_RECORDED instance=${instance}$`),
            )
          }
        })
      }
    })

    it('answers 503 with Retry-After while the database is away, at the claim and at the completion', async () => {
      const proxy = await startTcpProxy(db.url)
      const pool = new pg.Pool({ connectionString: proxy.url, max: 4, connectionTimeoutMillis: 2000 })
      pool.on('error', () => {})
      const lines: string[] = []
      const started = deferred()
      const release = deferred()
      const charges = counted('POST', '/v1/charges', async (_input, call) => {
        if (call === 2) {
          started.resolve()
          await release.promise
        }
        return json(201, { id: `ch_${call}` })
      })
      try {
        // A short lease, so the completion stops retrying soon: it retries for as long as the lease allows.
        const away = createEngine({ store: createPostgresStore({ pool, schema: db.schema }), staleAfterMs: 1500, claimRetryMs: 300 })
        await withApp({ engine: away, log: (line) => lines.push(line) }, [charges], async (app) => {
          proxy.cut()
          const key = randomUUID()
          const atClaim = await app.request(post('/v1/charges', key, { amount: 1 }))
          expect([atClaim.status, atClaim.headers.get('retry-after')]).toEqual([503, '1'])
          const body = problemOf(atClaim)
          expect(body).toMatchObject({
            type: 'https://oncely.dev/problems/idempotency-store-unavailable',
            retryable: true,
            retry_same_key: true,
            new_key_safe: false,
            operation_state: 'unknown',
          })
          expect(lines.some((line) => line.includes(body.instance))).toBe(true)
          expect(charges.calls).toBe(0)
          proxy.restore()
          expect((await app.request(post('/v1/charges', key, { amount: 1 }))).status).toBe(201)
          const pending = app.request(post('/v1/charges', randomUUID(), { amount: 1 }))
          await started.promise
          proxy.cut()
          release.resolve()
          const atCompletion = await pending
          expect([atCompletion.status, atCompletion.headers.get('retry-after')]).toEqual([503, '1'])
          // No step ran, so the claim was released: nothing ran that a new key could repeat.
          expect(problemOf(atCompletion)).toMatchObject({ retryable: true, retry_same_key: true })
        })
      } finally {
        proxy.restore()
        await pool.end()
        await proxy.close()
      }
    })

    it('accepts a numeric scope as its decimal string, and answers a scope of another type with a non-retryable 500', async () => {
      const charges = counted('POST', '/v1/charges', async (_input, call) => json(201, { id: `ch_${call}` }))
      const scope = (authorization: string | undefined) => {
        const id = scopeFromBearer(authorization)
        return id === '31' ? 31 : id === '32' ? (['not', 'a', 'scope'] as unknown as string) : id
      }
      const lines: string[] = []
      await withApp({ scope, log: (line) => lines.push(line) }, [charges], async (app) => {
        const key = randomUUID()
        expect((await app.request(post('/v1/charges', key, { amount: 1 }, user(31)))).status).toBe(201)
        expect(await rowCount('31')).toBe(1)
        const bad = await app.request(post('/v1/charges', key, { amount: 1 }, user(32)))
        expect(bad.status).toBe(500)
        expect(problemOf(bad).retryable).toBe(false)
        expect(lines.some((line) => line.includes('ONCELY_INVALID_SCOPE'))).toBe(true)
        expect(charges.calls).toBe(1)
      })
    })
  })
  waitConformance(harness)
}
