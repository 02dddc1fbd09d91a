import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { withIdempotency } from '../../src/adapters/node.js'
import { createClient, isWorthRetrying } from '../../src/client/index.js'
import { createEngine } from '../../src/index.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy } from '../helpers/tcp-proxy.js'

// The client honours what an oncely server says is safe (issue 23): it stops retrying a key the
// server says a retry cannot help, and tells the caller when a new key is safe.
let db: TestDatabase
let server: Server
let port: number
let exports = 0
beforeAll(async () => {
  db = await createTestDatabase()
  const engine = createEngine<Queryable>({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 30_000 })
  const scope = (req: import('node:http').IncomingMessage) => /^Bearer demo_(\d+)$/.exec(req.headers.authorization ?? '')?.[1]
  server = createServer(
    withIdempotency<Queryable>({ engine, scope, maxStoredBodyBytes: 64, log: () => {} }, (req, res) => {
      if (req.url === '/v1/exports') exports++
      const body = req.url === '/v1/exports' ? 'x'.repeat(1024) : '{"id":"ch_1"}'
      res.writeHead(201, { 'content-type': req.url === '/v1/exports' ? 'text/plain' : 'application/json' }).end(body)
    }),
  )
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  port = (server.address() as AddressInfo).port
})
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()))
  await db.close()
})

describe('the client and what the server says is safe', () => {
  it('stops at a result-unavailable answer instead of retrying it: the retry after a cut response is the last attempt', async () => {
    const proxy = await startTcpProxy(port)
    void proxy.cutNextAnswer()
    try {
      const client = createClient({ baseUrl: proxy.url, headers: { authorization: 'Bearer demo_1' }, baseDelayMs: 1, maxAttempts: 5 })
      const res = await client.post('/v1/exports', { month: '2025-01' })
      expect(res.attempts.map((attempt) => attempt.status ?? 'cut')).toEqual(['cut', 500])
      expect(res.replayed).toBe(true)
      expect(res.json()).toMatchObject({ type: 'https://oncely.dev/problems/result-unavailable', result_status: 201 })
      expect(res.advice).toEqual({ retrySameKey: false, newKeySafe: false, operationState: 'completed', keyTtlSeconds: 86_400 })
      expect(exports).toBe(1)
    } finally {
      await proxy.close()
    }
  })

  it('tells the caller a new key is safe when nothing ran, and how long a key lives on every answer', async () => {
    const client = createClient({ baseUrl: `http://127.0.0.1:${port}`, baseDelayMs: 1 })
    const refused = await client.post('/v1/charges', { amount: 1 })
    expect(refused.status).toBe(401)
    expect(refused.advice).toEqual({ retrySameKey: false, newKeySafe: true, operationState: 'none', keyTtlSeconds: 86_400 })
    const created = await client.post('/v1/charges', { amount: 1 }, { headers: { authorization: 'Bearer demo_2' } })
    expect(created.status).toBe(201)
    expect(created.advice).toEqual({ retrySameKey: undefined, newKeySafe: undefined, operationState: undefined, keyTtlSeconds: 86_400 })
  })

  it('retries a retryable status unless the server says the same key cannot help', () => {
    expect(isWorthRetrying(503, { retrySameKey: undefined })).toBe(true)
    expect(isWorthRetrying(503, { retrySameKey: true })).toBe(true)
    expect(isWorthRetrying(500, { retrySameKey: false })).toBe(false)
    expect(isWorthRetrying(422, { retrySameKey: true })).toBe(false)
  })
})
