import { afterEach, describe, expect, it } from 'vitest'
import { ClientRequestFailedError, createClient, describeAttempt, memoryKeyStore } from '../../src/client/index.js'
import { reply, startServer, type Handler, type TestServer } from './support/http-server.js'

// Issue 14 point 2: only what the transport reports as a network failure is retried.
const servers: TestServer[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()))
})

async function serve(handler: Handler): Promise<TestServer> {
  const server = await startServer(handler)
  servers.push(server)
  return server
}

async function requestFailure(promise: Promise<unknown>): Promise<ClientRequestFailedError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(error).toBeInstanceOf(ClientRequestFailedError)
  return error as ClientRequestFailedError
}

describe('network failures are retried, and the attempt says which', () => {
  it('ECONNREFUSED', async () => {
    const server = await serve((_request, res) => reply(res, 201, '{}'))
    const url = server.url
    await servers.pop()?.close()
    const error = await createClient({ baseUrl: url, baseDelayMs: 1, maxAttempts: 2 }).post('/v1/charges', {}).catch((e: unknown) => e as { attempts: { networkFailure: string }[] })
    expect(error.attempts.map((a) => a.networkFailure)).toEqual(['ECONNREFUSED', 'ECONNREFUSED'])
  })

  it('a connection cut before the whole response: UND_ERR_SOCKET, then the retry answers', async () => {
    const server = await serve((_request, res, n) => {
      if (n > 1) return reply(res, 201, '{}')
      res.writeHead(201, { 'content-length': '100' })
      res.write('{"id":')
      setImmediate(() => res.socket?.destroy())
    })
    const res = await createClient({ baseUrl: server.url, baseDelayMs: 1 }).post('/v1/charges', {})
    expect(res.status).toBe(201)
    expect(res.attempts[0]?.networkFailure).toBe('UND_ERR_SOCKET')
    expect(describeAttempt(res.attempts[0]!)).toMatch(/^attempt 1: UND_ERR_SOCKET \(network failure: /)
  })
})

describe('local faults are not retried', () => {
  it('a port fetch refuses ("bad port") fails once with ONCELY_CLIENT_REQUEST_FAILED', async () => {
    // 6000 (X11) is on fetch's list of blocked ports: nothing is ever sent there.
    const client = createClient({ baseUrl: 'http://127.0.0.1:6000', keyStore: memoryKeyStore(), baseDelayMs: 1, maxAttempts: 5 })
    const error = await requestFailure(client.post('/v1/charges', {}, { operationId: 'op' }))
    expect(error.code).toBe('ONCELY_CLIENT_REQUEST_FAILED')
    expect(error.attempts).toHaveLength(1)
    expect(error.attempts[0]?.networkFailure).toBeUndefined()
    expect(error.message).toContain('not a network failure, not retried')
  })

  it('a response body that cannot be decoded (bad gzip) is not retried: the server already acted', async () => {
    const server = await serve((_request, res) => {
      res.writeHead(201, { 'content-encoding': 'gzip', 'content-type': 'application/json' })
      res.end('this is not gzip')
    })
    const error = await requestFailure(createClient({ baseUrl: server.url, baseDelayMs: 1 }).post('/v1/charges', { amount: 1 }))
    expect(server.requests).toHaveLength(1)
    expect(error.attempts).toHaveLength(1)
    expect(error.message).toContain('Z_DATA_ERROR')
  })
})
