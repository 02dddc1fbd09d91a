import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { oncelyFastify } from '../../src/adapters/fastify.js'
import { withIdempotency } from '../../src/adapters/node.js'
import { idempotency } from '../../src/adapters/hono.js'
import { Hono } from 'hono'
import { createEngine, type Engine } from '../../src/engine/engine.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { sendOversizedBody } from '../helpers/oversized-body.js'

let db: TestDatabase
let engine: Engine<Queryable>
beforeAll(async () => {
  db = await createTestDatabase()
  engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }) })
})
afterAll(async () => {
  await db.close()
})

describe('fastify route config', () => {
  it('config.idempotency false opts a POST route out; true opts a GET route in', async () => {
    const app = Fastify()
    try {
      await app.register(oncelyFastify, { engine, scope: 'global' })
      app.post('/v1/webhooks', { config: { idempotency: false } }, async () => ({ received: true }))
      app.get('/v1/reports', { config: { idempotency: true } }, async () => ({ report: 1 }))
      const webhook = await app.inject({ method: 'POST', url: '/v1/webhooks', payload: {} })
      expect(webhook.statusCode).toBe(200)
      const unkeyed = await app.inject({ method: 'GET', url: '/v1/reports' })
      expect(unkeyed.statusCode).toBe(400)
      const keyed = await app.inject({ method: 'GET', url: '/v1/reports', headers: { 'idempotency-key': 'r1' } })
      const replay = await app.inject({ method: 'GET', url: '/v1/reports', headers: { 'idempotency-key': 'r1' } })
      expect([keyed.statusCode, replay.headers['idempotent-replayed']]).toEqual([200, 'true'])
    } finally {
      await app.close()
    }
  })
})

describe('hono body reading', () => {
  it("a body an earlier middleware read is taken from Hono's cache, never asked of the raw request (issue 21)", async () => {
    let rawBodyAsked = 0
    const app = new Hono()
    app.post(
      '/v1/charges',
      async (c, next) => {
        await c.req.text()
        // Under @hono/node-server, asking the raw request for its body builds a web Request.
        Object.defineProperty(c.req.raw, 'body', { get: () => (rawBodyAsked++, null) })
        await next()
      },
      idempotency({ engine, scope: () => 'hono-cache' }),
      (c) => c.json({ charged: true }, 201),
    )
    const send = (body: string) => app.request('/v1/charges', { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'cached-body' }, body })
    expect((await send('{"amount":1,"currency":"usd"}')).status).toBe(201)
    // The same JSON written otherwise replays; another amount is a mismatch: the fingerprint read the body.
    expect((await send('{ "currency": "usd", "amount": 1 }')).headers.get('idempotent-replayed')).toBe('true')
    expect((await send('{"amount":2,"currency":"usd"}')).status).toBe(422)
    expect(rawBodyAsked).toBe(0)
  })
})

describe('node:http body reading', () => {
  let server: Server
  let port: number
  let calls = 0
  beforeAll(async () => {
    server = createServer(
      withIdempotency({ engine, scope: 'global', maxBodyBytes: 1024 }, async (_req, res, { body }) => {
        calls++
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ body }))
      }),
    )
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    port = (server.address() as AddressInfo).port
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const send = (body: string, key: string) =>
    fetch(`http://127.0.0.1:${port}/v1/things`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body })

  it('answers 413 to a body above maxBodyBytes and 400 to invalid JSON, claiming nothing', async () => {
    const big = await send(JSON.stringify({ pad: 'x'.repeat(2048) }), 'k-big')
    expect(big.status).toBe(413)
    expect(((await big.json()) as { type: string }).type).toBe('https://oncely.dev/problems/body-too-large')
    const bad = await send('{"amount":', 'k-bad')
    expect(bad.status).toBe(400)
    expect(((await bad.json()) as { type: string }).type).toBe('https://oncely.dev/problems/invalid-json')
    expect(calls).toBe(0)
    const fixed = await send('{"amount":1}', 'k-bad')
    expect([fixed.status, await fixed.text()]).toEqual([201, '{"body":{"amount":1}}'])
  })

  it('reads a refused body to its end before the 413, so a client still sending reads it and the connection carries the next request', async () => {
    const head = 'POST /v1/things HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nIdempotency-Key: k-huge\r\n'
    const followUp = 'POST /v1/things HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nIdempotency-Key: k-after-huge\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}'
    const before = calls
    expect(await sendOversizedBody(port, head, 2 * 1024 * 1024, followUp)).toEqual({ statuses: [413, 201], writeError: undefined })
    expect(calls).toBe(before + 1)
  })
})

describe('the media type enters the fingerprint (issue 8, path 7)', () => {
  it('the same bytes under another Content-Type are another request: 422, never a replay', async () => {
    const server = createServer(
      withIdempotency({ engine, scope: 'global' }, async (_req, res) => {
        res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}')
      }),
    )
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const { port } = server.address() as AddressInfo
      const send = (contentType: string) =>
        fetch(`http://127.0.0.1:${port}/v1/notes`, { method: 'POST', headers: { 'content-type': contentType, 'idempotency-key': 'k-media' }, body: 'hi' })
      expect((await send('text/plain')).status).toBe(201)
      const replay = await send('text/plain; charset=utf-8')
      expect([replay.status, replay.headers.get('idempotent-replayed')]).toEqual([201, 'true'])
      expect((await send('application/octet-stream')).status).toBe(422)
    } finally {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })
})
