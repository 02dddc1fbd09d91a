import { afterEach, describe, expect, it } from 'vitest'
import { createProviderClient, ProviderUnavailableError, type ProviderClient } from '../../src/reference-service/provider-client.js'
import { createProviderHttp } from '../../src/reference-service/provider-http.js'
import { createReceiptSender } from '../../src/reference-service/receipt.js'
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
  client = createProviderClient(createProviderHttp(server.url), { timeoutMs })
  return { server, client }
}

describe('createProviderClient', () => {
  // undici's pool opens a second connection for a call sent as soon as the one before has
  // answered (the first is not yet back in the pool), then keeps to those two (seen: 20 calls one
  // after another, 2 connections); a connection per call would be five here.
  it('sends the key and the JSON body, and reuses its connections for charges one after another', async () => {
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
    expect(sockets.size).toBeLessThanOrEqual(2)
  })

  it('sends no Idempotency-Key when given none (the none strategy)', async () => {
    const { server, client } = await setUp(charged)
    await client.createCharge(request, undefined)
    expect(server.requests[0]?.headers['idempotency-key']).toBeUndefined()
  })

  // The answer is gathered chunk by chunk: a character whose bytes arrive in two chunks must be
  // decoded whole, not as two replacement characters.
  it('reads an answer whose multi-byte character is split between two chunks', async () => {
    const bytes = Buffer.from(JSON.stringify({ id: 'pch_é', created: 1 }))
    const cut = bytes.indexOf(Buffer.from('é')) + 1
    const { client } = await setUp((_, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(bytes.length) })
      res.write(bytes.subarray(0, cut))
      setTimeout(() => res.end(bytes.subarray(cut)), 20)
    })
    expect(await client.createCharge(request, 'k')).toEqual({ outcome: 'charged', charge: { id: 'pch_é', created: 1 } })
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
    client = createProviderClient(createProviderHttp(closed.url), { timeoutMs: 1000 })
    const error = await client.createCharge(request, 'k').catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ProviderUnavailableError)
    expect((error as ProviderUnavailableError).status).toBe(502)
  })
})

describe('createReceiptSender', () => {
  it("sends the receipt's JSON on the charge client's kept-alive connections, one after the other", async () => {
    const sockets = new Set<unknown>()
    server = await startServer((received, res) => {
      sockets.add(res.socket)
      if (received.url === '/v1/messages') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"sent":true}')
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'pch_1', created: 1 }))
    })
    // One connection at most: the receipts share it with the charges only if they share the pool.
    const http = createProviderHttp(server.url, { maxSockets: 1 })
    client = createProviderClient(http, { timeoutMs: 5000 })
    const sendReceipt = createReceiptSender(http, { timeoutMs: 5000 })
    const charge = { id: 'ch_1', object: 'charge' as const, amount: 1, currency: 'usd', customer: 'cus_1', status: 'succeeded', provider_charge: 'pch_1', created: 1 }
    for (const key of ['k-1', 'k-2', 'k-3']) {
      await client.createCharge(request, key)
      await sendReceipt({ customer: 'cus_1', charge })
    }
    expect(server.requests.map((r) => `${r.method} ${r.url}`)).toEqual(Array.from({ length: 3 }, () => ['POST /v1/charges', 'POST /v1/messages']).flat())
    expect(JSON.parse(server.requests[1]?.body ?? '')).toEqual({ customer: 'cus_1', charge })
    expect(server.requests[1]?.headers['idempotency-key']).toBeUndefined()
    expect(sockets.size).toBe(1)
  })

  it.each<[string, Handler, RegExp]>([
    ['a 500', (_, res) => void res.writeHead(500).end('{}'), /answered 500 to the receipt/],
    ['a provider silent past timeoutMs', () => {}, /did not answer within 200 ms/],
    [
      'an answer cut short',
      (_, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
        res.write('{"sent":')
        setTimeout(() => res.destroy(), 10)
      },
      /closed the connection before its answer was complete/,
    ],
  ])('%s rejects', async (_, handler, message) => {
    server = await startServer(handler)
    const http = createProviderHttp(server.url)
    client = createProviderClient(http, { timeoutMs: 5000 })
    const charge = { id: 'ch_1', object: 'charge' as const, amount: 1, currency: 'usd', customer: 'cus_1', status: 'succeeded', provider_charge: 'pch_1', created: 1 }
    await expect(createReceiptSender(http, { timeoutMs: 200 })({ customer: 'cus_1', charge })).rejects.toThrow(message)
  })
})
