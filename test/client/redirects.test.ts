import { afterEach, describe, expect, it } from 'vitest'
import { createClient, memoryKeyStore } from '../../src/client/index.js'
import { reply, startServer, type Handler, type TestServer } from './support/http-server.js'

// Issue 14 point 1: a 3xx is returned, never followed.
const servers: TestServer[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()))
})

async function serve(handler: Handler): Promise<TestServer> {
  const server = await startServer(handler)
  servers.push(server)
  return server
}

const redirectTo = (status: number, location: string): Handler => (_request, res) => reply(res, status, '', { location })

describe('redirects are returned, never followed', () => {
  it('a 303 to a POST comes back as the 303: no GET is sent with the key', async () => {
    const server = await serve((request, res) => (request.url === '/v1/charges' ? redirectTo(303, '/v1/charges/ch_1')(request, res, 0) : reply(res, 200, '{"id":"ch_1"}')))
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore(), baseDelayMs: 1 })
    const res = await client.post('/v1/charges', { amount: 1000 }, { operationId: 'order-1:charge' })
    expect(res.status).toBe(303)
    expect(res.headers.get('location')).toBe('/v1/charges/ch_1')
    expect(server.requests.map((r) => `${r.method} ${r.url}`)).toEqual(['POST /v1/charges'])
    expect(res.attempts).toHaveLength(1)
  })

  it.each([307, 308])('a %i to a POST with a body comes back once, not retried as a network error', async (status) => {
    const server = await serve(redirectTo(status, '/v2/charges'))
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore(), baseDelayMs: 1 })
    const res = await client.post('/v1/charges', { amount: 1000 })
    expect(res.status).toBe(status)
    expect(server.requests).toHaveLength(1)
    expect(res.attempts.map((a) => a.status)).toEqual([status])
  })

  it('a 307 to another origin sends neither the key nor the custom auth header there', async () => {
    const elsewhere = await serve((_request, res) => reply(res, 201, '{}'))
    const server = await serve(redirectTo(307, `${elsewhere.url}/collect`))
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore(), headers: { 'x-api-key': 'sk_test_secret' }, baseDelayMs: 1 })
    const res = await client.post('/v1/charges')
    expect(res.status).toBe(307)
    expect(server.requests[0]?.headers['x-api-key']).toBe('sk_test_secret')
    expect(elsewhere.requests).toEqual([])
  })
})
