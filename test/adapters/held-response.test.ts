import { createServer, type RequestListener } from 'node:http'
import { randomUUID } from 'node:crypto'
import express from 'express'
import { Hono } from 'hono'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { idempotency } from '../../src/adapters/express.js'
import type { AdapterOptions, OutcomeEvent } from '../../src/adapters/http.js'
import { idempotency as honoIdempotency } from '../../src/adapters/hono.js'
import { withIdempotency } from '../../src/adapters/node.js'
import { createEngine, type Engine } from '../../src/engine/engine.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { serveOnFreePort, type AppUnderTest } from './harness.js'

let db: TestDatabase
let engine: Engine<Queryable>
beforeAll(async () => {
  db = await createTestDatabase()
  engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 30_000 })
})
afterAll(async () => {
  await db.close()
})

// Issue 8 path 12: nothing the adapters do may crash the process.
const unhandled: unknown[] = []
const onUnhandled = (reason: unknown) => void unhandled.push(reason)
beforeEach(() => {
  unhandled.length = 0
  process.on('unhandledRejection', onUnhandled)
})
afterEach(() => {
  process.off('unhandledRejection', onUnhandled)
  expect(unhandled).toEqual([])
})

async function serve(listener: RequestListener, test: (app: AppUnderTest) => Promise<void>): Promise<void> {
  const app = await serveOnFreePort(createServer(listener))
  try {
    await test(app)
  } finally {
    await app.close()
  }
}
const post = (key: string, body = '{"amount":1}') => ({ method: 'POST', path: '/v1/charges', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body })

type ListenerOptions = Pick<AdapterOptions<never, Queryable>, 'log' | 'maxStoredBodyBytes' | 'onOutcome'>

/** The same handler behaviour in Express and in node:http. */
const frameworks = [
  {
    name: 'express',
    listener: (options: ListenerOptions, handler: (res: import('node:http').ServerResponse) => void): RequestListener => {
      const app = express()
      app.post('/v1/charges', express.json(), idempotency({ engine, scope: 'global', ...options }), (_req, res) => handler(res))
      return app
    },
  },
  {
    name: 'node:http',
    listener: (options: ListenerOptions, handler: (res: import('node:http').ServerResponse) => void): RequestListener => {
      return withIdempotency({ engine, scope: 'global', ...options }, (_req, res) => handler(res))
    },
  },
]

describe.each(frameworks)('$name: the held response', ({ listener }) => {
  it('sends and stores only the first of two answers (issue 8 path 9)', async () => {
    const lines: string[] = []
    let calls = 0
    const handler = (res: import('node:http').ServerResponse) => {
      calls++
      res.writeHead(201, { 'content-type': 'application/json', 'x-answer': 'first' }).end('{"n":1}')
      res.writeHead(200, { 'content-type': 'text/plain', 'x-answer': 'second' }).end('two')
    }
    await serve(listener({ log: (line) => lines.push(line) }, handler), async (app) => {
      const key = randomUUID()
      const first = await app.request(post(key))
      expect([first.status, first.headers.get('x-answer'), first.body.toString()]).toEqual([201, 'first', '{"n":1}'])
      const replay = await app.request(post(key))
      expect([replay.status, replay.headers.get('x-answer'), replay.body.toString(), replay.headers.get('idempotent-replayed')]).toEqual([201, 'first', '{"n":1}', 'true'])
      expect(calls).toBe(1)
      expect(lines.some((line) => line.includes('twice'))).toBe(true)
    })
  })

  it('holds flushed headers until the first chunk, then streams, stores and replays the response; nothing rejects unhandled (issue 8 path 12, issue 23)', async () => {
    let calls = 0
    const handler = (res: import('node:http').ServerResponse) => {
      calls++
      res.statusCode = 200
      res.setHeader('content-type', 'text/plain')
      res.flushHeaders()
      res.write('x'.repeat(32))
      res.end('y'.repeat(32))
    }
    await serve(listener({ log: () => {} }, handler), async (app) => {
      const key = randomUUID()
      const first = await app.request(post(key))
      expect([first.status, first.headers.get('content-type'), first.body.toString()]).toEqual([200, 'text/plain', 'x'.repeat(32) + 'y'.repeat(32)])
      const replay = await app.request(post(key))
      expect([replay.status, replay.body.equals(first.body), replay.headers.get('idempotent-replayed')]).toEqual([200, true, 'true'])
      expect(calls).toBe(1)
    })
  })

  it('records a stream the client walked away from as result-unavailable, even when the handler ends it later; the retry does not run it again (issue 23)', async () => {
    const started = deferred()
    const release = deferred()
    const recorded = deferred<OutcomeEvent>()
    let calls = 0
    const handler = (res: import('node:http').ServerResponse) => {
      calls++
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: 1\n\n')
      started.resolve()
      void release.promise.then(() => res.end('data: 2\n\n'))
    }
    await serve(listener({ log: () => {}, onOutcome: (event) => recorded.resolve(event) }, handler), async (app) => {
      const key = randomUUID()
      const gone = new AbortController()
      const first = app.request({ ...post(key), signal: gone.signal }).catch((error: unknown) => error)
      await started.promise
      gone.abort()
      expect(await first).toBeInstanceOf(Error)
      expect(await recorded.promise).toMatchObject({ outcome: 'created', status: 200 })
      release.resolve()
      const retry = await app.request(post(key))
      expect(retry.status).toBe(500)
      const problem = JSON.parse(retry.body.toString()) as { type: string; detail: string; result_status: number }
      expect(problem).toMatchObject({ type: 'https://oncely.dev/problems/result-unavailable', result_status: 200 })
      expect(problem.detail).toContain('the connection closed before the handler ended it')
      expect(calls).toBe(1)
    })
  })
})

describe('express: a body the guard cannot see (issue 8 path 14)', () => {
  for (const [name, mount] of [
    ['idempotency() before express.json()', (app: express.Express, once: express.RequestHandler) => app.post('/v1/charges', once, express.json(), (req, res) => void res.status(201).json(req.body))],
    ['no body parser at all', (app: express.Express, once: express.RequestHandler) => app.post('/v1/charges', once, (_req, res) => void res.status(201).json({ ok: true }))],
  ] as const) {
    it(`answers 500 and logs the fix with ${name}, and never replays another body`, async () => {
      const lines: string[] = []
      const app = express()
      mount(app, idempotency({ engine, scope: 'global', log: (line) => lines.push(line) }))
      await serve(app, async (client) => {
        const key = randomUUID()
        const first = await client.request(post(key, '{"amount":1}'))
        const other = await client.request(post(key, '{"amount":2}'))
        expect([first.status, other.status]).toEqual([500, 500])
        const problem = JSON.parse(first.body.toString()) as { type: string; retryable: boolean; instance: string }
        expect(problem).toMatchObject({ type: 'https://oncely.dev/problems/request-body-not-read', retryable: false })
        expect(lines.filter((line) => line.includes('express.json()') && line.includes(problem.instance))).toHaveLength(1)
        expect(other.headers.get('idempotent-replayed')).toBeNull()
      })
    })
  }

  it('still guards a request without a body when no parser is mounted', async () => {
    const app = express()
    app.post('/v1/charges', idempotency({ engine, scope: 'global' }), (_req, res) => void res.status(201).json({ ok: true }))
    await serve(app, async (client) => {
      const key = randomUUID()
      const request = { method: 'POST', path: '/v1/charges', headers: { 'idempotency-key': key } }
      expect((await client.request(request)).status).toBe(201)
      expect((await client.request(request)).headers.get('idempotent-replayed')).toBe('true')
    })
  })
})

describe('hono: a response body that errors while it is read (issue 8 path 4)', () => {
  it('ends the claim, so the retry runs instead of getting 409', async () => {
    let calls = 0
    const app = new Hono()
    app.onError((_error, c) => c.text('Internal Server Error', 500))
    app.post('/v1/charges', honoIdempotency({ engine, scope: 'global' }), () => {
      calls++
      if (calls > 1) return Response.json({ ok: true }, { status: 201 })
      return new Response(new ReadableStream({ pull: (controller) => controller.error(new Error('the upstream went away')) }), { status: 200 })
    })
    const key = randomUUID()
    const send = () => app.request('/v1/charges', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{}' })
    expect((await send()).status).toBe(500)
    const retry = await send()
    expect([retry.status, calls]).toEqual([201, 2])
  })
})
