import { afterEach, describe, expect, it } from 'vitest'
import { createClient, memoryKeyStore, fingerprintOperation, type RequestBody } from '../../src/client/index.js'
import { reply, startServer, statusSequence, type Handler, type TestServer } from './support/http-server.js'

// Issue 14 points 5, 6 and 7: what each body type sends, and what its operation is bound to.
const servers: TestServer[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()))
})

async function serve(handler: Handler): Promise<TestServer> {
  const server = await startServer(handler)
  servers.push(server)
  return server
}

const url = 'http://127.0.0.1/v1/charges'

describe('bodies', () => {
  it('a URLSearchParams body is sent as a form, and two different forms are two requests', async () => {
    const server = await serve(statusSequence(201))
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    await client.post('/v1/charges', new URLSearchParams({ amount: '1000', currency: 'usd' }), { operationId: 'form' })
    expect(server.requests[0]).toMatchObject({ body: 'amount=1000&currency=usd', headers: { 'content-type': 'application/x-www-form-urlencoded;charset=UTF-8' } })
    await expect(client.post('/v1/charges', new URLSearchParams({ amount: '2000', currency: 'usd' }), { operationId: 'form' })).rejects.toMatchObject({ code: 'ONCELY_CLIENT_OPERATION_MISMATCH' })
    expect(server.requests).toHaveLength(1)
  })

  it('an ArrayBuffer and a DataView are sent as their bytes, and differ by their bytes', async () => {
    const server = await serve(statusSequence(201))
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    await client.post('/upload', new TextEncoder().encode('abc').buffer, { operationId: 'bytes' })
    await client.post('/upload', new DataView(new TextEncoder().encode('xabcx').buffer, 1, 3))
    expect(server.requests.map((r) => [r.body, r.headers['content-type']])).toEqual([
      ['abc', 'application/octet-stream'],
      ['abc', 'application/octet-stream'],
    ])
    expect(fingerprintOperation('POST', url, new TextEncoder().encode('abc').buffer)).not.toBe(fingerprintOperation('POST', url, new TextEncoder().encode('abd').buffer))
  })

  it.each([
    ['a ReadableStream', () => new ReadableStream(), 'stream'],
    ['FormData', () => new FormData(), 'boundary'],
    ['a Blob', () => new Blob(['x']), 'arrayBuffer'],
    ['a Map', () => new Map([['a', 1]]), 'Map'],
    ['a bigint', () => 1n, 'bigint'],
  ])('%s is refused before anything is sent', async (_name, make, says) => {
    const server = await serve(statusSequence(201))
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    await expect(client.post('/upload', make() as unknown as RequestBody, { operationId: 'refused' })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining(says) as unknown })
    expect(server.requests).toHaveLength(0)
  })

  it('a Uint8Array is copied once: a buffer reused during the backoff wait does not change the retry', async () => {
    const server = await serve(statusSequence(503, 201))
    const buffer = new TextEncoder().encode('first payload')
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore(), baseDelayMs: 1, onRetry: () => buffer.set(new TextEncoder().encode('OTHER')) })
    const res = await client.post('/upload', buffer, { operationId: 'reused-buffer' })
    expect(res.status).toBe(201)
    expect(server.requests.map((r) => r.body)).toEqual(['first payload', 'first payload'])
  })

  it('a string under a JSON content type is sent as typed and bound to its canonical parse', async () => {
    const server = await serve(statusSequence(201))
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    const typed = '{ "amount": 9007199254740993, "currency": "usd" }'
    const headers = { 'content-type': 'application/json' }
    await client.post('/v1/charges', typed, { operationId: 'typed', headers })
    expect(server.requests[0]?.body).toBe(typed)
    // Reordered and respaced, it is the same operation…
    await client.post('/v1/charges', '{"currency":"usd","amount":9007199254740993}', { operationId: 'typed', headers })
    expect(server.requests.map((r) => r.headers['idempotency-key'])).toEqual([server.requests[0]?.headers['idempotency-key'], server.requests[0]?.headers['idempotency-key']])
    // …and another amount is another operation.
    await expect(client.post('/v1/charges', '{"amount":1000,"currency":"usd"}', { operationId: 'typed', headers })).rejects.toMatchObject({ code: 'ONCELY_CLIENT_OPERATION_MISMATCH' })
  })

  it('a plain object is sent as JSON; its fingerprint matches the same JSON typed as text', () => {
    expect(fingerprintOperation('POST', url, { b: 1, a: [true, null] })).toBe(fingerprintOperation('POST', url, '{"a":[true,null],"b":1}', 'application/problem+json'))
    expect(fingerprintOperation('POST', url, '{"a":1}')).not.toBe(fingerprintOperation('POST', url, { a: 1 }))
  })
})

describe('the response', () => {
  it.each([['idempotent-replayed'], ['x-idempotent-replayed']])('is flagged replayed on %s: true', async (header) => {
    const server = await serve((_request, res, n) => reply(res, 201, '{}', n === 1 ? {} : { [header]: 'true' }))
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    expect((await client.post('/v1/charges', {}, { operationId: 'op' })).replayed).toBe(false)
    expect((await client.post('/v1/charges', {}, { operationId: 'op' })).replayed).toBe(true)
  })
})
