import { createHash } from 'node:crypto'
import { mkdir, mkdtemp, rm, unlink } from 'node:fs/promises'
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

  it('exit 0 with the body when the key store cannot mark the operation finished; stderr says so (issue 22)', async () => {
    const keys = await keyDirectory()
    const record = path.join(keys, `${createHash('sha256').update('order-7:charge').digest('hex')}.json`)
    // The record's name taken by a directory while the request is in flight: the finish cannot
    // read the record back (EISDIR), as on a disk gone bad.
    const server = await serve(async (_request, res) => {
      await unlink(record)
      await mkdir(record)
      reply(res, 201, '{"id":"ch_7"}')
    })
    const run = await runRequestCommand(['POST', `${server.url}/v1/charges`, '--operation', 'order-7:charge', '--data', charge, '--key-store', keys, ...fast])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.ok)
    expect(JSON.parse(run.stdout)).toEqual({ id: 'ch_7' })
    expect(run.stderr).toMatch(/operation "order-7:charge" got its final response \(201\) but the key store could not mark it finished .*EISDIR/)
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

describe('oncely request, hardened (issues 12 and 14)', () => {
  async function stateHome(): Promise<string> {
    return keyDirectory()
  }

  it('keeps keys in one per-user directory: the same --operation from two folders sends one key', async () => {
    const server = await serve(statusSequence(503, 201))
    const home = await stateHome()
    const env = { XDG_STATE_HOME: home }
    const args = ['POST', `${server.url}/v1/charges`, '--operation', 'order-42:charge', '--data', charge, '--max-attempts', '1']
    const first = await runRequestCommand(args, { env, cwd: await keyDirectory() })
    expect(first.code, first.stderr).toBe(REQUEST_EXIT.serverError)
    const second = await runRequestCommand(args, { env, cwd: await keyDirectory() })
    expect(second.code, second.stderr).toBe(REQUEST_EXIT.ok)
    const [one, two] = server.requests.map((r) => r.headers['idempotency-key'])
    expect(two).toBe(one)
    const help = await runRequestCommand(['--help'], { env })
    expect(help.stdout).toContain(path.join(home, 'oncely', 'keys'))
  })

  it('sends --data byte for byte as typed: big numbers, duplicate members and a JSON string survive', async () => {
    const server = await serve(statusSequence(201))
    const cases = [
      ['{"amount": 9007199254740993, "a": 1, "a": 2}', 'application/json'],
      ['"hello"', 'application/json'],
      ['hello', 'text/plain; charset=utf-8'],
    ]
    for (const [data] of cases) {
      const run = await runRequestCommand(['POST', `${server.url}/v1/notes`, '--data', data ?? ''])
      expect(run.code, run.stderr).toBe(REQUEST_EXIT.ok)
    }
    expect(server.requests.map((r) => [r.body, r.headers['content-type']])).toEqual(cases)
  })

  it('binds --data to its canonical parse: the same JSON respaced is the same operation', async () => {
    const server = await serve(statusSequence(201))
    const keys = await keyDirectory()
    const send = (data: string) => runRequestCommand(['POST', `${server.url}/v1/charges`, '--operation', 'op', '--data', data, '--key-store', keys])
    expect((await send('{"amount":1000,"currency":"usd"}')).code).toBe(REQUEST_EXIT.ok)
    expect((await send('{ "currency": "usd", "amount": 1000 }')).code).toBe(REQUEST_EXIT.ok)
    expect((await send('{"amount":2000,"currency":"usd"}')).code).toBe(REQUEST_EXIT.operationMismatch)
    expect(new Set(server.requests.map((r) => r.headers['idempotency-key'])).size).toBe(1)
    expect(server.requests.map((r) => r.body)).toEqual(['{"amount":1000,"currency":"usd"}', '{ "currency": "usd", "amount": 1000 }'])
  })

  it('says when the answer is a replay', async () => {
    const server = await serve((_request, res) => reply(res, 201, '{"id":"ch_1"}', { 'idempotent-replayed': 'true' }))
    const run = await runRequestCommand(['POST', `${server.url}/v1/charges`, '--data', charge])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.ok)
    expect(run.stderr).toContain('a replay')
  })

  it('returns a redirect instead of following it, and says so: exit 1', async () => {
    const server = await serve((_request, res) => reply(res, 303, '', { location: '/v1/charges/ch_1?token=sk_redirect' }))
    const run = await runRequestCommand(['POST', `${server.url}/v1/charges`, '--data', charge])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.failure)
    expect(server.requests.map((r) => r.method)).toEqual(['POST'])
    expect(run.stderr).toContain('not followed')
    expect(run.stderr).not.toContain('sk_redirect')
  })

  it('names a host that does not resolve', async () => {
    // RFC 6761: `.invalid` never resolves.
    const run = await runRequestCommand(['POST', 'http://base.invalid/v1/charges', '--data', charge, '--max-attempts', '1'])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.gaveUp)
    expect(run.stderr).toMatch(/could not resolve the host 'base\.invalid', check the URL/)
  })

  it('reports a fault that is not a network failure once, in one line: exit 1', async () => {
    const run = await runRequestCommand(['POST', 'http://127.0.0.1:6000/v1/charges', '--data', charge])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.failure)
    expect(run.stderr.trim().split('\n')).toHaveLength(1)
    expect(run.stderr).toContain('attempt 1: fetch failed: bad port (not a network failure, not retried)')
    expect(run.stderr).not.toMatch(/^\s+at /m)
  })

  it.each([
    ['a header line without a colon', ['--header', 'Authorization Bearer sk_live_secret']],
    ['a header value pasted with typographic quotes', ['--header', 'x-api-key: \u201csk_live_secret\u201d']],
    ['a header name that is not a token', ['--header', 'bad name: sk_live_secret']],
    ['an unquoted header value', ['--header', 'authorization:', 'sk_live_secret']],
  ])('exit 2 without a stack trace or the secret on %s', async (_name, flags) => {
    const run = await runRequestCommand(['POST', 'http://127.0.0.1:1/x', ...flags])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.usage)
    expect(run.stderr).not.toContain('sk_live_secret')
    expect(run.stderr).not.toMatch(/^\s+at /m)
  })

  it.each([
    ['a host and port without a scheme', 'localhost:3000/v1/charges', "did you mean 'http://localhost:3000/v1/charges'"],
    ['credentials in the URL', 'http://me:sk_live_secret@127.0.0.1:1/x', 'credentials'],
    ['a query secret in a bad URL', 'http//api.example.com/x?api_key=sk_live_secret', 'not an http(s) URL'],
  ])('exit 2 with a clear message on %s, never showing a secret', async (_name, target, says) => {
    const run = await runRequestCommand(['POST', target])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.usage)
    expect(run.stderr).toContain(says)
    expect(run.stderr).not.toContain('sk_live_secret')
  })

  it('never prints query values when it gives up', async () => {
    const server = await serve(statusSequence(503))
    const run = await runRequestCommand(['GET', `${server.url}/v1/charges?api_key=sk_live_secret&limit=1`, '--max-attempts', '2', ...fast])
    expect(run.code, run.stderr).toBe(REQUEST_EXIT.serverError)
    expect(run.stderr).toContain('api_key=***')
    expect(run.stderr).not.toContain('sk_live_secret')
  })
})
