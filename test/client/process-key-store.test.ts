import { afterEach, describe, expect, it } from 'vitest'
import { createClient } from '../../src/client/index.js'
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

describe('the default key store is one per process', () => {
  it('two clients in one process send one key for one operationId', async () => {
    // Issue 14 point 3: a client per request must not run an operation twice.
    const server = await serve(statusSequence(503, 201))
    const operationId = `order-${Math.random()}:charge`
    const first = createClient({ baseUrl: server.url, maxAttempts: 1 })
    await first.post('/v1/charges', { amount: 1000 }, { operationId }).catch(() => undefined)
    const second = createClient({ baseUrl: server.url })
    expect((await second.post('/v1/charges', { amount: 1000 }, { operationId })).status).toBe(201)
    const [one, two] = server.requests.map((r) => r.headers['idempotency-key'])
    expect(one).toBeDefined()
    expect(two).toBe(one)
  })
})

describe('the default retry budget', () => {
  it('is not a count: a key in progress for more than five attempts is still waited for', async () => {
    // Issue 12 point 6: after a crash the server answers 409 until the claim can be taken over.
    const server = await serve((_request, res, n) => (n <= 8 ? reply(res, 409, '{}', { 'retry-after': '0' }) : reply(res, 201, '{"id":"ch_1"}')))
    const res = await createClient({ baseUrl: server.url }).post('/v1/charges', { amount: 1000 })
    expect(res.status).toBe(201)
    expect(res.attempts).toHaveLength(9)
  })
})
