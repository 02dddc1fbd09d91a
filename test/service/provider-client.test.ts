import { afterEach, describe, expect, it } from 'vitest'
import { createProviderClient, ProviderUnavailableError, type ProviderClient } from '../../src/reference-service/provider-client.js'
import { startServer, type Handler, type TestServer } from '../client/support/http-server.js'

// The service's client of the payment provider: kept-alive connections, and every way a charge
// can fail to come back is a ProviderUnavailableError (the key stays retryable with the same
// provider key), never a result.
const request = { amount: 1000, currency: 'usd', customer: 'cus_ok', metadata: { order_id: 'ord_1' } }
const charged: Handler = (_, res) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'pch_1', created: 1 }))
}

let server: TestServer | undefined
let client: ProviderClient | undefined
afterEach(async () => {
  client?.close()
  await server?.close()
  server = client = undefined
})

async function setUp(handler: Handler, timeoutMs = 5000): Promise<{ server: TestServer; client: ProviderClient }> {
  server = await startServer(handler)
  client = createProviderClient(server.url, { timeoutMs })
  return { server, client }
}

describe('createProviderClient', () => {
  it('sends the key and the JSON body, and reuses one connection for charges one after another', async () => {
    const sockets = new Set<unknown>()
    const { server, client } = await setUp((received, res, n) => {
      sockets.add(res.socket)
      void charged(received, res, n)
    })
    for (let i = 0; i < 5; i++) {
      expect(await client.createCharge(request, `key-${i}`)).toEqual({ outcome: 'charged', charge: { id: 'pch_1', created: 1 } })
    }
    expect(server.requests.map((r) => r.headers['idempotency-key'])).toEqual(['key-0', 'key-1', 'key-2', 'key-3', 'key-4'])
    expect(JSON.parse(server.requests[0]?.body ?? '')).toEqual(request)
    expect(sockets.size).toBe(1)
  })

  it('sends no Idempotency-Key when given none (the none strategy)', async () => {
    const { server, client } = await setUp(charged)
    await client.createCharge(request, undefined)
    expect(server.requests[0]?.headers['idempotency-key']).toBeUndefined()
  })

  it('a 402 is a decline with the provider\'s code and message', async () => {
    const { client } = await setUp((_, res) => {
      res.writeHead(402, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: 'card_declined', message: 'no' } }))
    })
    expect(await client.createCharge(request, 'k')).toEqual({ outcome: 'declined', code: 'card_declined', message: 'no' })
  })

  const failures: Array<[string, number, Handler]> = [
    ['a 503', 503, (_, res) => void res.writeHead(503).end('{}')],
    ['an unexpected status', 502, (_, res) => void res.writeHead(500).end('{}')],
    [
      'an answer cut short',
      502,
      (_, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
        res.write('{"id":')
        setTimeout(() => res.destroy(), 10)
      },
    ],
    ['a connection dropped with no answer', 502, (_, res) => void res.destroy()],
  ]
  it.each(failures)('%s is ProviderUnavailableError %i', async (_, status, handler) => {
    const { client } = await setUp(handler)
    const error = await client.createCharge(request, 'k').catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ProviderUnavailableError)
    expect((error as ProviderUnavailableError).status).toBe(status)
  })

  it('a provider silent past timeoutMs is ProviderUnavailableError 502', async () => {
    const { client } = await setUp(() => {}, 200)
    const error = await client.createCharge(request, 'k').catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ProviderUnavailableError)
    expect((error as ProviderUnavailableError).status).toBe(502)
  })

  it('a provider that cannot be reached is ProviderUnavailableError 502', async () => {
    const closed = await startServer(charged)
    await closed.close()
    client = createProviderClient(closed.url, { timeoutMs: 1000 })
    const error = await client.createCharge(request, 'k').catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ProviderUnavailableError)
    expect((error as ProviderUnavailableError).status).toBe(502)
  })
})
