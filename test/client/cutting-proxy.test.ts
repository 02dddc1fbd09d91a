import { afterEach, describe, expect, it } from 'vitest'
import { createClient, fileKeyStore } from '../../src/client/index.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { reply, startServer, type TestServer } from './support/http-server.js'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'

const closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close()
})

/**
 * A server that keeps its promise: the first request with a key does the work (counted) and
 * stores the answer; a request with a key it has seen replays that answer.
 */
async function idempotentServer(): Promise<{ server: TestServer; executions: () => number }> {
  const answers = new Map<string, string>()
  let executions = 0
  const server = await startServer((req, res) => {
    const key = String(req.headers['idempotency-key'])
    let answer = answers.get(key)
    if (answer === undefined) {
      executions++
      answer = JSON.stringify({ id: `ch_${executions}`, body: JSON.parse(req.body) as unknown })
      answers.set(key, answer)
    }
    reply(res, 201, answer)
  })
  closers.push(() => server.close())
  return { server, executions: () => executions }
}

/** A proxy to `server` that cuts the first `cuts` answers the moment the server starts sending them. */
async function proxyTo(server: TestServer, cuts: number): Promise<TcpProxy> {
  const proxy = await startTcpProxy(server.port)
  for (let cut = 0; cut < cuts; cut++) void proxy.cutNextAnswer()
  closers.push(() => proxy.close())
  return proxy
}

describe('through a real TCP proxy that cuts the connection before the response arrives', () => {
  it('the first two attempts are cut after the server did the work; the third gets the one result', async () => {
    const { server, executions } = await idempotentServer()
    const proxy = await proxyTo(server, 2)
    const directory = await mkdtemp(path.join(tmpdir(), 'oncely-keys-'))
    closers.push(() => rm(directory, { recursive: true, force: true }))
    const client = createClient({ baseUrl: proxy.url, keyStore: fileKeyStore(directory), baseDelayMs: 1 })

    const res = await client.post('/v1/charges', { amount: 1000, currency: 'usd' }, { operationId: 'order-42:charge' })

    expect(res.status).toBe(201)
    expect(res.json()).toEqual({ id: 'ch_1', body: { amount: 1000, currency: 'usd' } })
    expect(proxy.cuts()).toBe(2)
    expect(res.attempts.map((a) => a.status ?? 'cut')).toEqual(['cut', 'cut', 201])
    expect(server.requests).toHaveLength(3)
    expect(new Set(server.requests.map((r) => r.headers['idempotency-key']))).toEqual(new Set([res.key]))
    expect(executions()).toBe(1)
  })

  it('a retry wrapper minting a key per attempt would have run it three times (the control)', async () => {
    const { server, executions } = await idempotentServer()
    const proxy = await proxyTo(server, 2)
    const client = createClient({ baseUrl: proxy.url, maxAttempts: 1 })
    let res
    for (let attempt = 1; attempt <= 3 && !res; attempt++) {
      res = await client.post('/v1/charges', { amount: 1000 }).catch(() => undefined)
    }
    expect(res?.status).toBe(201)
    expect(executions()).toBe(3)
  })
})
