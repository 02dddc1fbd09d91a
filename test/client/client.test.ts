import { afterEach, describe, expect, it } from 'vitest'
import {
  ClientAbortedError,
  ClientGaveUpError,
  createClient,
  memoryKeyStore,
  type ClientOptions,
  type KeyStore,
  type RetryEvent,
} from '../../src/client/index.js'
import { deferred } from '../helpers/deferred.js'
import { reply, startServer, statusSequence, type Handler, type TestServer } from './support/http-server.js'

const servers: TestServer[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()))
})

async function serve(handler: Handler): Promise<TestServer> {
  const server = await startServer(handler)
  servers.push(server)
  return server
}

/** Fast retries: the waits are not under test here unless a test says so. */
function fastClient(server: TestServer, options: Partial<ClientOptions> = {}) {
  return createClient({ baseUrl: server.url, baseDelayMs: 1, maxDelayMs: 5, ...options })
}

async function gaveUp(promise: Promise<unknown>): Promise<ClientGaveUpError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(error).toBeInstanceOf(ClientGaveUpError)
  return error as ClientGaveUpError
}

describe('what is retried', () => {
  it.each([400, 422])('%i is not retried: one request, the answer returned', async (status) => {
    const server = await serve(statusSequence(status, 201))
    const res = await fastClient(server).post('/v1/charges', { amount: 1000 })
    expect(res.status).toBe(status)
    expect(res.ok).toBe(false)
    expect(server.requests).toHaveLength(1)
    expect(res.attempts).toHaveLength(1)
  })

  it.each([408, 425, 409, 429, 500, 502, 503, 504])('%i is retried with the same key', async (status) => {
    const server = await serve(statusSequence(status, 201))
    const res = await fastClient(server).post('/v1/charges', { amount: 1000 })
    expect(res.status).toBe(201)
    expect(server.requests).toHaveLength(2)
    const keys = server.requests.map((r) => r.headers['idempotency-key'])
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/)
    expect(keys[1]).toBe(keys[0])
    expect(res.key).toBe(keys[0])
    expect(res.attempts.map((a) => a.status)).toEqual([status, 201])
  })

  it('429 with Retry-After: 1 waits about a second', async () => {
    const server = await serve((_req, res, n) => (n === 1 ? reply(res, 429, '{}', { 'retry-after': '1' }) : reply(res, 201, '{}')))
    const started = performance.now()
    const res = await fastClient(server).post('/v1/charges', { amount: 1000 })
    const elapsed = performance.now() - started
    expect(res.status).toBe(201)
    expect(elapsed).toBeGreaterThanOrEqual(900)
    expect(elapsed).toBeLessThan(3000)
    expect(res.attempts[1]?.delayMs).toBe(1000)
  })

  it('a Retry-After is cut to maxRetryAfterMs', async () => {
    const server = await serve((_req, res, n) => (n === 1 ? reply(res, 503, '{}', { 'retry-after': '3600' }) : reply(res, 201, '{}')))
    const res = await fastClient(server, { maxRetryAfterMs: 20 }).post('/v1/charges', {})
    expect(res.status).toBe(201)
    expect(res.attempts[1]?.delayMs).toBe(20)
  })

  it('GET, PUT and DELETE are retried and carry no key; POST and PATCH always carry one', async () => {
    const server = await serve((req, res) => reply(res, server.requests.filter((r) => r.method === req.method).length === 1 ? 503 : 200, '{}'))
    const client = fastClient(server)
    for (const send of [() => client.get('/r'), () => client.put('/r', { a: 1 }), () => client.delete('/r'), () => client.post('/r', { a: 1 }), () => client.patch('/r', { a: 1 })]) {
      expect((await send()).status).toBe(200)
    }
    const seen = server.requests.map((r) => `${r.method} ${r.headers['idempotency-key'] === undefined ? 'no key' : 'key'}`)
    expect(seen).toEqual(['GET no key', 'GET no key', 'PUT no key', 'PUT no key', 'DELETE no key', 'DELETE no key', 'POST key', 'POST key', 'PATCH key', 'PATCH key'])
  })

  it('sends the client headers, the call headers and a JSON body', async () => {
    const server = await serve(statusSequence(201))
    const client = fastClient(server, { headers: { authorization: 'Bearer demo_42', 'x-a': 'client' } })
    await client.post('/v1/charges?expand=all', { amount: 1000, currency: 'usd' }, { headers: { 'x-a': 'call' } })
    const [request] = server.requests
    expect(request).toMatchObject({ method: 'POST', url: '/v1/charges?expand=all', body: '{"amount":1000,"currency":"usd"}' })
    expect(request?.headers).toMatchObject({ authorization: 'Bearer demo_42', 'x-a': 'call', 'content-type': 'application/json' })
  })
})

describe('giving up', () => {
  it('reports every attempt: status, delay and key', async () => {
    const server = await serve(statusSequence(503))
    const retries: RetryEvent[] = []
    const client = fastClient(server, { maxAttempts: 3, onRetry: (event) => retries.push(event) })
    const error = await gaveUp(client.post('/v1/charges', { amount: 1000 }, { operationId: 'order-1:charge' }))
    expect(error.code).toBe('ONCELY_CLIENT_GAVE_UP')
    const key = server.requests[0]?.headers['idempotency-key']
    expect(error.attempts.map((a) => ({ number: a.number, status: a.status, key: a.key, error: a.error }))).toEqual([
      { number: 1, status: 503, key, error: undefined },
      { number: 2, status: 503, key, error: undefined },
      { number: 3, status: 503, key, error: undefined },
    ])
    expect(error.attempts[0]?.delayMs).toBe(0)
    expect(error.attempts.slice(1).map((a) => a.delayMs)).toEqual(retries.map((r) => r.delayMs))
    expect(retries.map((r) => [r.attempt.number, r.operationId, r.method])).toEqual([
      [1, 'order-1:charge', 'POST'],
      [2, 'order-1:charge', 'POST'],
    ])
    expect(error.response?.status).toBe(503)
    expect(error.message).toContain('3 attempts')
  })

  it('reports network errors when nothing answers', async () => {
    const server = await serve(statusSequence(200))
    const url = server.url
    await server.close()
    servers.length = 0
    const client = createClient({ baseUrl: url, baseDelayMs: 1, maxAttempts: 2 })
    const error = await gaveUp(client.post('/v1/charges', {}))
    expect(error.attempts).toHaveLength(2)
    expect(error.attempts.every((a) => a.status === undefined && a.error instanceof Error)).toBe(true)
    expect(error.response).toBeUndefined()
    expect(error.message).toContain('ECONNREFUSED')
  })

  it('stops at the deadline, not at maxAttempts', async () => {
    const server = await serve(statusSequence(503))
    const client = fastClient(server, { maxAttempts: 1000, deadlineMs: 300, baseDelayMs: 40, maxDelayMs: 40, random: () => 1 })
    const started = performance.now()
    const error = await gaveUp(client.post('/v1/charges', {}))
    expect(performance.now() - started).toBeLessThan(1000)
    expect(error.message).toContain('deadline')
    expect(error.attempts.length).toBeGreaterThan(1)
    expect(error.attempts.length).toBeLessThan(1000)
  })

  it('does not wait for a Retry-After past the deadline', async () => {
    const server = await serve((_req, res) => reply(res, 429, '{}', { 'retry-after': '30' }))
    const started = performance.now()
    const error = await gaveUp(fastClient(server, { deadlineMs: 5000 }).post('/v1/charges', {}))
    expect(performance.now() - started).toBeLessThan(1000)
    expect(error.attempts).toHaveLength(1)
    expect(error.message).toContain('deadline')
  })
})

describe('timeouts, cuts and aborts', () => {
  it('an attempt with no response within attemptTimeoutMs is retried with the same key', async () => {
    const release = deferred()
    const server = await serve(async (_req, res, n) => {
      if (n === 1) await release.promise
      reply(res, 201, '{}')
    })
    const res = await fastClient(server, { attemptTimeoutMs: 200 }).post('/v1/charges', {})
    release.resolve()
    expect(res.status).toBe(201)
    expect(res.attempts[0]?.error?.name).toBe('AttemptTimeoutError')
    expect(server.requests.map((r) => r.headers['idempotency-key'])).toEqual([res.key, res.key])
  })

  it('a connection cut halfway through the body is a failed attempt', async () => {
    const server = await serve((_req, res, n) => {
      if (n > 1) return reply(res, 201, '{"id":"ch_1"}')
      res.writeHead(201, { 'content-type': 'application/json', 'content-length': '100' })
      res.write('{"id":')
      setImmediate(() => res.socket?.destroy())
    })
    const res = await fastClient(server).post('/v1/charges', {})
    expect(res.json()).toEqual({ id: 'ch_1' })
    expect(res.attempts.map((a) => a.status ?? 'error')).toEqual(['error', 201])
  })

  it('the AbortSignal stops the waits: ONCELY_CLIENT_ABORTED with the attempts so far', async () => {
    const server = await serve(statusSequence(503))
    const controller = new AbortController()
    const client = fastClient(server, { baseDelayMs: 60_000, maxDelayMs: 60_000, random: () => 0.5, onRetry: () => controller.abort() })
    const error = await client.post('/v1/charges', {}, { signal: controller.signal }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ClientAbortedError)
    expect((error as ClientAbortedError).code).toBe('ONCELY_CLIENT_ABORTED')
    expect((error as ClientAbortedError).attempts).toHaveLength(1)
    expect(server.requests).toHaveLength(1)
  })

  it('an already aborted signal sends nothing', async () => {
    const server = await serve(statusSequence(201))
    const error = await fastClient(server).post('/v1/charges', {}, { signal: AbortSignal.abort() }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ClientAbortedError)
    expect(server.requests).toHaveLength(0)
  })
})

describe('operations', () => {
  it('one operationId sends one key, across calls; another operationId gets another', async () => {
    const server = await serve(statusSequence(503, 201, 201, 201))
    const client = fastClient(server, { keyStore: memoryKeyStore() })
    const charge = { amount: 1000, currency: 'usd' }
    await client.post('/v1/charges', charge, { operationId: 'order-42:charge' })
    await client.post('/v1/charges', { currency: 'usd', amount: 1000 }, { operationId: 'order-42:charge' })
    await client.post('/v1/charges', charge, { operationId: 'order-43:charge' })
    const keys = server.requests.map((r) => r.headers['idempotency-key'])
    expect(keys).toHaveLength(4)
    expect(new Set(keys.slice(0, 3)).size).toBe(1)
    expect(keys[3]).not.toBe(keys[0])
  })

  it('without an operationId each call mints its own key', async () => {
    const server = await serve(statusSequence(201))
    const client = fastClient(server)
    await client.post('/v1/charges', { a: 1 })
    await client.post('/v1/charges', { a: 1 })
    const [first, second] = server.requests.map((r) => r.headers['idempotency-key'])
    expect(first).not.toBe(second)
  })

  it('the same operationId with a different request is refused before any request leaves', async () => {
    const keyStore = memoryKeyStore()
    const first = await serve(statusSequence(201))
    await fastClient(first, { keyStore }).post('/v1/charges', { amount: 1000 }, { operationId: 'order-42:charge' })
    const server = await serve(statusSequence(201))
    const client = fastClient(server, { keyStore })
    const cases = [
      () => client.post('/v1/charges', { amount: 2000 }, { operationId: 'order-42:charge' }),
      () => client.patch('/v1/charges', { amount: 1000 }, { operationId: 'order-42:charge' }),
      () => client.post('/v1/refunds', { amount: 1000 }, { operationId: 'order-42:charge' }),
    ]
    for (const send of cases) {
      await expect(send()).rejects.toMatchObject({ code: 'ONCELY_CLIENT_OPERATION_MISMATCH' })
    }
    expect(server.requests).toHaveLength(0)
  })

  it('a key store that cannot persist stops the call before it is sent', async () => {
    const server = await serve(statusSequence(201))
    const broken: KeyStore = {
      claim: () => Promise.reject(new Error('disk full')),
      finish: () => Promise.resolve(),
      prune: () => Promise.resolve(0),
    }
    const error = await fastClient(server, { keyStore: broken }).post('/v1/charges', {}, { operationId: 'op' }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'ONCELY_KEY_STORE_FAILED', cause: { message: 'disk full' } })
    expect(server.requests).toHaveLength(0)
  })

  it('the key is persisted before the first attempt is sent', async () => {
    const keyStore = memoryKeyStore()
    const seenInStore: unknown[] = []
    const server = await serve(async (req, res) => {
      seenInStore.push((await keyStore.claim({ operationId: 'op', key: 'other', fingerprint: 'x', createdAt: new Date(), finishedAt: null, finalStatus: null, expiresAt: null })).key)
      seenInStore.push(req.headers['idempotency-key'])
      reply(res, 201, '{}')
    })
    await fastClient(server, { keyStore }).post('/v1/charges', {}, { operationId: 'op' })
    expect(seenInStore[0]).toBe(seenInStore[1])
  })

  it('a finished operation is kept until its TTL, then pruned; a pending one is kept', async () => {
    const keyStore = memoryKeyStore()
    const server = await serve(statusSequence(201))
    const client = fastClient(server, { keyStore, keyTtlMs: 60_000, maxAttempts: 1 })
    await client.post('/v1/charges', {}, { operationId: 'finished' })
    const pending = await keyStore.claim({ operationId: 'pending', key: 'k', fingerprint: 'f', createdAt: new Date(), finishedAt: null, finalStatus: null, expiresAt: null })
    expect(await client.prune(new Date(Date.now() + 30_000))).toBe(0)
    expect(await client.prune(new Date(Date.now() + 61_000))).toBe(1)
    expect(await keyStore.claim({ ...pending, key: 'new' })).toMatchObject({ key: 'k' })
    await client.post('/v1/charges', {}, { operationId: 'finished' })
    const [first, second] = server.requests.map((r) => r.headers['idempotency-key'])
    expect(second).not.toBe(first)
  })
})
