import { afterEach, describe, expect, it } from 'vitest'
import { createClient, fingerprintOperation, isOncelyError, memoryKeyStore, type RequestBody } from '../../src/client/index.js'
import { startServer, statusSequence, type TestServer } from './support/http-server.js'

// Issue 22 point 4: a JSON body is sent as JSON.stringify renders it and its operation is bound to
// the canonical form of exactly those bytes; data JSON.stringify would change (NaN sent as null, a
// function member dropped) is refused, the same way with or without an operationId.
const servers: TestServer[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()))
})

async function serve(): Promise<TestServer> {
  const server = await startServer(statusSequence(201))
  servers.push(server)
  return server
}

const url = 'http://127.0.0.1/v1/charges'

/** A body that cannot be sent as it is: each entry is [name, body, what the message says]. */
const unfaithful: readonly (readonly [string, () => unknown, string])[] = [
  ['NaN', () => ({ amount: Number.NaN }), 'NaN'],
  ['Infinity', () => ({ amount: Number.POSITIVE_INFINITY }), 'Infinity'],
  ['-Infinity in an array', () => [1, Number.NEGATIVE_INFINITY], '-Infinity'],
  ['a top-level NaN', () => Number.NaN, 'NaN'],
  ['a function member', () => ({ amount: 1000, toString: () => 'x' }), 'function'],
  ['a function in an array', () => [() => 1], 'function'],
  ['a symbol member', () => ({ amount: 1000, tag: Symbol('t') }), 'symbol'],
  ['undefined in an array', () => [1, undefined], 'undefined in an array'],
  ['a hole in an array', () => [1, , 3], 'undefined in an array'], // eslint-disable-line no-sparse-arrays
  ['a nested bigint', () => ({ amount: 10n }), 'bigint'],
  ['a nested Map', () => ({ items: new Map([['a', 1]]) }), 'Map'],
  ['a lone surrogate in a string', () => ({ name: 'x\ud800' }), 'lone surrogate'],
  ['a lone surrogate in a member name', () => ({ ['\udc00']: 1 }), 'lone surrogate'],
  ['a cycle', () => cyclic(), 'cycle'],
]

function cyclic(): unknown {
  const a: Record<string, unknown> = { secret: 'card 4242' }
  a.self = a
  return a
}

describe('JSON data that JSON.stringify would not send as it is', () => {
  it.each(unfaithful)('%s is refused before anything is sent, with an operationId', async (_name, make, says) => {
    const server = await serve()
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    const error = await client.post('/v1/charges', make() as RequestBody, { operationId: 'op' }).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_INVALID_OPTION'), String(error)).toBe(true)
    expect((error as Error).message).toContain('option body')
    expect((error as Error).message).toContain(says)
    expect(server.requests).toHaveLength(0)
  })

  it.each(unfaithful)('%s is refused before anything is sent, without an operationId', async (_name, make, says) => {
    const server = await serve()
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    await expect(client.post('/v1/charges', make() as RequestBody)).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining(says) as unknown })
    expect(server.requests).toHaveLength(0)
  })

  it.each(unfaithful)('%s is refused by fingerprintOperation too', (_name, make) => {
    expect(() => fingerprintOperation('POST', url, make() as RequestBody)).toThrow(expect.objectContaining({ code: 'ONCELY_INVALID_OPTION' }) as Error)
  })

  it('never shows the body, nor a member name, in the message', async () => {
    const error = await createClient({ baseUrl: 'http://127.0.0.1:1', keyStore: memoryKeyStore() })
      .post('/v1/charges', { card_4242_4242: Number.NaN, nested: cyclic() } as unknown as RequestBody)
      .catch((e: unknown) => e)
    expect((error as Error).message).not.toMatch(/4242|card|secret/)
  })
})

describe('JSON data sent as it is', () => {
  it('leaves an undefined member out: the bytes and the operation are those of the object without it', async () => {
    const server = await serve()
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    await client.post('/v1/charges', { amount: 1000, coupon: undefined }, { operationId: 'optional' })
    await client.post('/v1/charges', { amount: 1000 }, { operationId: 'optional' })
    expect(server.requests.map((r) => r.body)).toEqual(['{"amount":1000}', '{"amount":1000}'])
    expect(server.requests[1]?.headers['idempotency-key']).toBe(server.requests[0]?.headers['idempotency-key'])
  })

  it('honours toJSON: a Date is sent as its ISO string and bound to that string', async () => {
    const server = await serve()
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    const at = new Date('2025-01-02T03:04:05.678Z')
    await client.post('/v1/charges', { at } as unknown as RequestBody, { operationId: 'dated' })
    expect(server.requests[0]?.body).toBe('{"at":"2025-01-02T03:04:05.678Z"}')
    expect(fingerprintOperation('POST', url, { at } as unknown as RequestBody)).toBe(fingerprintOperation('POST', url, { at: '2025-01-02T03:04:05.678Z' }))
  })

  it('binds the operation to the bytes sent, even when toJSON answers differently each time', () => {
    let calls = 0
    const drifting = { toJSON: () => ++calls }
    const first = fingerprintOperation('POST', url, { n: drifting } as unknown as RequestBody)
    expect(first).toBe(fingerprintOperation('POST', url, { n: 1 }))
  })
})

describe('JSON typed as text', () => {
  it.each([
    ['a number too large for a double', '{"amount":1e400}'],
    ['an escaped lone surrogate', '{"name":"\\ud800"}'],
  ])('with %s is sent as typed and bound to its bytes', async (_name, typed) => {
    const server = await serve()
    const client = createClient({ baseUrl: server.url, keyStore: memoryKeyStore() })
    const headers = { 'content-type': 'application/json' }
    const res = await client.post('/v1/charges', typed, { operationId: 'typed', headers })
    expect(res.status).toBe(201)
    expect(server.requests[0]?.body).toBe(typed)
    expect(fingerprintOperation('POST', url, typed, 'application/json')).toBe(fingerprintOperation('POST', url, typed))
  })
})
