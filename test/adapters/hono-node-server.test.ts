import type { AddressInfo } from 'node:net'
import type { Server } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { countConstructions } from '../helpers/count-constructions.js'
import { deferred } from '../helpers/deferred.js'
import { engineOn } from '../helpers/engine.js'

// Counts the web Responses built in this module graph: `@hono/node-server` keeps the global
// `Response` it finds when it loads (the counter, here) for the moments it must build a real one,
// and answers `new Response(text)` with a lightweight one of its own.
const responses = countConstructions('Response')
const { serve } = await import('@hono/node-server')
const { Hono } = await import('hono')
const { stream } = await import('hono/streaming')
const { idempotency, requestHeader } = await import('../../src/adapters/hono.js')
const { requestText } = await import('../../src/reference-service/request-text.js')

let db: TestDatabase
let server: Server
let url: string
let runs = 0
// The stream a client walks away from (issue 23).
const walkedAway = { started: deferred(), recorded: deferred(), release: deferred() }
let streamRuns = 0

beforeAll(async () => {
  db = await createTestDatabase()
  const { engine } = engineOn(db, { ttlMs: 3_600_000 })
  const app = new Hono()
  const once = idempotency({ engine, scope: () => 'user-1' })
  app.post('/json', once, (c) => c.json({ run: ++runs }, 201, { 'x-made': 'json' }))
  // As the reference service does: its body read from Node's request, the user from a header.
  app.post(
    '/read-first',
    async (c, next) => {
      await requestText(c)
      await next()
    },
    idempotency({ engine, scope: (c) => requestHeader(c, 'x-user') ?? 'nobody' }),
    (c) => c.json({ run: ++runs, user: requestHeader(c, 'x-user') }, 201),
  )
  // A middleware that replaces the request to change a header is read through, not around.
  app.post(
    '/rewritten',
    async (c, next) => {
      const headers = new Headers(c.req.raw.headers)
      headers.set('x-user', 'rewritten')
      c.req.raw = new Request(c.req.raw.url, { method: 'POST', headers })
      await next()
    },
    (c) => c.text(requestHeader(c, 'x-user') ?? 'none'),
  )
  // A request frozen by a middleware takes no property: its headers are read through it each time.
  app.post(
    '/frozen',
    async (c, next) => {
      c.req.raw = Object.freeze(new Request(c.req.raw.url, { method: 'POST', headers: c.req.raw.headers }))
      await next()
    },
    (c) => c.text(`${requestHeader(c, 'x-user') ?? 'none'} ${requestHeader(c, 'x-user') ?? 'none'}`),
  )
  app.post('/text', once, (c) => c.text(`run ${++runs}`))
  // A redirect's headers are immutable, as a fetched response's are.
  app.post('/redirect', once, () => (++runs, Response.redirect('http://example.test/next', 303)))
  const recorded = idempotency({ engine, scope: () => 'user-1', log: () => {}, onOutcome: (event) => event.outcome === 'created' && walkedAway.recorded.resolve() })
  app.post('/stream', recorded, (c) => {
    streamRuns++
    c.header('content-type', 'text/event-stream')
    return stream(c, async (s) => {
      await s.write('data: 1\n\n')
      walkedAway.started.resolve()
      await walkedAway.release.promise
      await s.write('data: 2\n\n')
    })
  })
  server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server))
  })
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})

afterAll(async () => {
  responses.restore()
  await new Promise((resolve) => server?.close(resolve))
  await db?.close()
})

const post = (path: string, key: string) => fetch(`${url}${path}`, { method: 'POST', headers: { 'idempotency-key': key }, redirect: 'manual' })

describe('oncely/hono on @hono/node-server (issue 21)', () => {
  it('stores and answers a c.json or c.text body as given, without building a web Response around it', async () => {
    responses.reset()
    const first = await post('/json', 'json-1')
    expect(responses.count()).toBe(0)
    expect([first.status, first.headers.get('content-type'), first.headers.get('x-made'), first.headers.get('idempotency-key-ttl'), await first.text()]).toEqual([201, 'application/json', 'json', '3600', '{"run":1}'])
    const text = await post('/text', 'text-1')
    expect(responses.count()).toBe(0)
    expect([text.status, text.headers.get('content-type'), text.headers.get('idempotency-key-ttl'), await text.text()]).toEqual([200, 'text/plain; charset=UTF-8', '3600', 'run 2'])
    const replay = await post('/json', 'json-1')
    expect([replay.status, replay.headers.get('idempotent-replayed'), replay.headers.get('x-made'), await replay.text()]).toEqual([201, 'true', 'json', '{"run":1}'])
    expect(runs).toBe(2)
  })

  it('copies a response whose headers cannot change to add the key TTL', async () => {
    const first = await post('/redirect', 'redirect-1')
    expect([first.status, first.headers.get('location'), first.headers.get('idempotency-key-ttl')]).toEqual([303, 'http://example.test/next', '3600'])
    const replay = await post('/redirect', 'redirect-1')
    expect([replay.status, replay.headers.get('location'), replay.headers.get('idempotent-replayed')]).toEqual([303, 'http://example.test/next', 'true'])
    expect(runs).toBe(3)
  })

  it('records a stream the client walked away from as result-unavailable: the cancel reaches the adapter, and the retry does not run it again (issue 23)', async () => {
    const gone = new AbortController()
    const first = await fetch(`${url}/stream`, { method: 'POST', headers: { 'idempotency-key': 'stream-1' }, signal: gone.signal })
    expect([first.status, first.headers.get('content-type')]).toEqual([200, 'text/event-stream'])
    const reader = (first.body as ReadableStream<Uint8Array>).getReader()
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('data: 1\n\n')
    await walkedAway.started.promise
    gone.abort()
    await walkedAway.recorded.promise
    walkedAway.release.resolve()
    const retry = await post('/stream', 'stream-1')
    expect(retry.status).toBe(500)
    const problem = (await retry.json()) as { type: string; detail: string; result_status: number }
    expect(problem).toMatchObject({ type: 'https://oncely.dev/problems/result-unavailable', result_status: 200 })
    expect(problem.detail).toContain('the client went away')
    expect(streamRuns).toBe(1)
  })

  it('replays without building a web Headers, reading the request headers from Node and writing the stored ones as a record (issue 21)', async () => {
    const send = (key: string) => fetch(`${url}/read-first`, { method: 'POST', headers: { 'idempotency-key': key, 'x-user': 'u-7', 'content-type': 'application/json' }, body: '{"a":1}' })
    const first = await send('read-first-1')
    expect([first.status, await first.json()]).toEqual([201, { run: runs, user: 'u-7' }])
    const headers = countConstructions('Headers')
    try {
      const replay = await send('read-first-1')
      expect(headers.count()).toBe(0)
      expect([replay.status, replay.headers.get('idempotent-replayed'), replay.headers.get('content-type'), await replay.json()]).toEqual([201, 'true', 'application/json', { run: runs, user: 'u-7' }])
    } finally {
      headers.restore()
    }
    // The key and the scope were read from Node's headers: another user's same key is its own operation.
    const other = await fetch(`${url}/read-first`, { method: 'POST', headers: { 'idempotency-key': 'read-first-1', 'x-user': 'u-8', 'content-type': 'application/json' }, body: '{"a":1}' })
    expect([other.status, other.headers.get('idempotent-replayed'), ((await other.json()) as { user: string }).user]).toEqual([201, null, 'u-8'])
    const rewritten = await fetch(`${url}/rewritten`, { method: 'POST', headers: { 'x-user': 'u-9' } })
    expect(await rewritten.text()).toBe('rewritten')
    const frozen = await fetch(`${url}/frozen`, { method: 'POST', headers: { 'x-user': 'u-10' } })
    expect([frozen.status, await frozen.text()]).toEqual([200, 'u-10 u-10'])
  })
})
