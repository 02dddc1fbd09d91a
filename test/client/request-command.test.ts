import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { REQUEST_EXIT } from '../../src/cli/commands/request.js'
import { deferred } from '../helpers/deferred.js'
import { reply, startServer, statusSequence, type Handler, type TestServer } from './support/http-server.js'
import { runRequestCommand, startNode } from './support/node-process.js'

const servers: TestServer[] = []
const directories: string[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()))
})
afterAll(async () => {
  await Promise.all(directories.map((directory) => rm(directory, { recursive: true, force: true })))
})

async function serve(handler: Handler): Promise<TestServer> {
  const server = await startServer(handler)
  servers.push(server)
  return server
}

async function keyDirectory(): Promise<string> {
  const directory = await mkdtemp(path.join(tmpdir(), 'oncely-cli-keys-'))
  directories.push(directory)
  return directory
}

const charge = '{"amount":1000,"currency":"usd","customer":"cus_42"}'
const fast = ['--base-delay-ms', '1']

describe('oncely request', () => {
  it('exit 0 on a final 2xx: the body on stdout, one line per attempt on stderr, one key', async () => {
    const server = await serve(statusSequence(503, 201))
    const keys = await keyDirectory()
    const run = await runRequestCommand(['POST', `${server.url}/v1/charges`, '--operation', 'order-42:charge', '--data', charge, '--header', 'authorization: Bearer demo_42', '--key-store', keys, ...fast])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.ok)
    expect(JSON.parse(run.stdout)).toEqual({ n: 2, status: 201 })
    const lines = run.stderr.trim().split('\n')
    expect(lines).toHaveLength(2)
    expect(lines[0]).toMatch(/attempt 1: 503 .*retrying in \d+ ms/)
    expect(lines[1]).toMatch(/attempt 2: 201/)
    const sent = server.requests.map((r) => r.headers['idempotency-key'])
    expect(sent[0]).toBeDefined()
    expect(sent[1]).toBe(sent[0])
    expect(lines[0]).toContain(String(sent[0]))
    expect(server.requests[0]).toMatchObject({ body: charge, headers: { authorization: 'Bearer demo_42', 'content-type': 'application/json' } })
  })

  it('exit 4 on a final 4xx, which is not retried', async () => {
    const server = await serve(statusSequence(422, 201))
    const run = await runRequestCommand(['POST', `${server.url}/v1/charges`, '--data', charge, ...fast])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.clientError)
    expect(JSON.parse(run.stdout)).toEqual({ n: 1, status: 422 })
    expect(server.requests).toHaveLength(1)
  })

  it('exit 5 when it gives up on a server error', async () => {
    const server = await serve(statusSequence(503))
    const run = await runRequestCommand(['POST', `${server.url}/v1/charges`, '--data', charge, '--max-attempts', '3', ...fast])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.serverError)
    expect(server.requests).toHaveLength(3)
    expect(run.stderr).toMatch(/attempt 3: 503/)
    expect(run.stderr).toContain('gave up')
  })

  it('exit 3 when it gives up with no answer', async () => {
    const server = await serve(statusSequence(200))
    const url = server.url
    await server.close()
    servers.length = 0
    const run = await runRequestCommand(['POST', `${url}/v1/charges`, '--data', charge, '--max-attempts', '2', ...fast])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.gaveUp)
    expect(run.stderr.match(/^oncely request: attempt \d: ECONNREFUSED/gm)).toHaveLength(2)
  })

  it('exit 6 when the operation was first used for another body; nothing is sent', async () => {
    const server = await serve(statusSequence(201))
    const keys = await keyDirectory()
    const first = await runRequestCommand(['POST', `${server.url}/v1/charges`, '--operation', 'order-42:charge', '--data', charge, '--key-store', keys])
    expect(first.code, first.stderr).toBe(REQUEST_EXIT.ok)
    const second = await runRequestCommand(['POST', `${server.url}/v1/charges`, '--operation', 'order-42:charge', '--data', '{"amount":2000}', '--key-store', keys])
    expect(second.code, second.stderr).toBe(REQUEST_EXIT.operationMismatch)
    expect(second.stderr).toContain('different request')
    expect(server.requests).toHaveLength(1)
  })

  it('GET is retried and carries no key', async () => {
    const server = await serve(statusSequence(500, 200))
    const run = await runRequestCommand(['GET', `${server.url}/v1/charges?limit=1`, ...fast])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.ok)
    expect(server.requests.map((r) => [r.method, r.url, r.headers['idempotency-key']])).toEqual([
      ['GET', '/v1/charges?limit=1', undefined],
      ['GET', '/v1/charges?limit=1', undefined],
    ])
  })

  it.each([
    ['no URL', ['POST']],
    ['a bad URL', ['POST', 'nowhere']],
    ['a bad --max-attempts', ['POST', 'http://127.0.0.1:1/x', '--max-attempts', 'ten']],
    ['a zero --max-attempts', ['POST', 'http://127.0.0.1:1/x', '--max-attempts', '0']],
    ['a bad --header', ['POST', 'http://127.0.0.1:1/x', '--header', 'no colon']],
    ['an unknown flag', ['POST', 'http://127.0.0.1:1/x', '--retries', '3']],
    ['--operation on GET', ['GET', 'http://127.0.0.1:1/x', '--operation', 'op']],
  ])('exit 2 on bad usage: %s', async (_name, args) => {
    const run = await runRequestCommand(args)
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.usage)
    expect(run.stderr).toContain("see 'oncely request --help'")
  })

  it('--help documents every exit code', async () => {
    const run = await runRequestCommand(['--help'])
    expect(run.code).toBe(0)
    for (const code of Object.values(REQUEST_EXIT)) expect(run.stdout).toMatch(new RegExp(`^  ${code} `, 'm'))
  })
})

describe('a client process stopped mid-request', () => {
  it('exit 130 on SIGINT during an attempt; the rerun sends the same key', async () => {
    const firstArrived = deferred<string>()
    const server = await serve((req, res, n) => {
      if (n === 1) return firstArrived.resolve(String(req.headers['idempotency-key']))
      reply(res, 201, '{"id":"ch_1"}')
    })
    const keys = await keyDirectory()
    const args = ['request', 'POST', `${server.url}/v1/charges`, '--operation', 'order-42:charge', '--data', charge, '--key-store', keys]
    const interrupted = startNode('src/cli/main.ts', args)
    const firstKey = await firstArrived.promise
    interrupted.child.kill('SIGINT')
    const stopped = await interrupted.finished
    expect(stopped.code, stopped.stderr).toBe(REQUEST_EXIT.interrupted)
    expect(stopped.stderr).toContain('aborted after')

    const rerun = await runRequestCommand(args.slice(1))
    expect(rerun.code, rerun.stderr).toBe(REQUEST_EXIT.ok)
    expect(server.requests.map((r) => r.headers['idempotency-key'])).toEqual([firstKey, firstKey])
  })

  it('SIGKILLed after its first attempt was sent, restarted with the same operation, sends the same key', async () => {
    const firstArrived = deferred<string>()
    const release = deferred()
    const server = await serve(async (req, res, n) => {
      if (n === 1) {
        firstArrived.resolve(String(req.headers['idempotency-key']))
        await release.promise
        return
      }
      reply(res, 201, '{"id":"ch_1"}')
    })
    const keys = await keyDirectory()
    const args = ['request', 'POST', `${server.url}/v1/charges`, '--operation', 'order-42:charge', '--data', charge, '--key-store', keys]

    const doomed = startNode('src/cli/main.ts', args)
    const firstKey = await firstArrived.promise
    doomed.child.kill('SIGKILL')
    const killed = await doomed.finished
    expect(killed.signal).toBe('SIGKILL')
    release.resolve()

    const restarted = await runRequestCommand(args.slice(1))
    expect(restarted.code, restarted.stderr).toBe(REQUEST_EXIT.ok)
    expect(server.requests.map((r) => r.headers['idempotency-key'])).toEqual([firstKey, firstKey])
    expect(restarted.stdout).toBe('{"id":"ch_1"}')
  })
})
