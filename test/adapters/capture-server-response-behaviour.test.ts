import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type OutgoingHttpHeaders, type RequestListener, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { captureServerResponse } from '../../src/adapters/capture-server-response.js'
import { withIdempotency } from '../../src/adapters/node.js'
import { createEngine, type Engine } from '../../src/index.js'
import type { LogFields } from '../../src/logger.js'
import type { CapturedResponse } from '../../src/adapters/request-context.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'

// How a held node:http response (Express's and Nest's too) reaches the wire: the headers
// writeHead is given, what a replacement answer keeps, repeated headers, a second answer.

let db: TestDatabase
let engine: Engine<Queryable>
beforeAll(async () => {
  db = await createTestDatabase()
  engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 30_000 })
})
afterAll(async () => {
  await db.close()
})

type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>

/** Another worker takes the request's claim over: the fence token changes under the handler. */
async function loseClaim(req: IncomingMessage): Promise<void> {
  const table = `"${db.schema.replaceAll('"', '""')}".idempotency_key`
  await db.pool.query(`UPDATE ${table} SET fence_token = gen_random_uuid() WHERE key = $1`, [req.headers['idempotency-key']])
}

/** A node:http server whose requests first get a CORS header, as a middleware before the guard would set it. */
async function serve(listener: RequestListener, test: (url: string) => Promise<void>): Promise<void> {
  const server = createServer((req, res) => {
    res.setHeader('access-control-allow-origin', '*')
    listener(req, res)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  try {
    await test(`http://127.0.0.1:${port}`)
  } finally {
    server.closeAllConnections()
    await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())))
  }
}

function guarded(handler: Handler): RequestListener {
  return withIdempotency<Queryable>({ engine, scope: 'global', log: () => {} }, async (req, res) => handler(req, res))
}

const post = (url: string, key: string | undefined) =>
  fetch(`${url}/v1/charges`, { method: 'POST', headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) }, body: '{"amount":1}' })

describe('captureServerResponse', () => {
  it('takes writeHead headers given as a flat array of names and values, and stores no header for a name without a value', async () => {
    const handler: Handler = (_req, res) => {
      res.writeHead(201, ['x-a', '1', 'x-b', '2', 'x-dangling'])
      res.end('ok')
    }
    await serve(guarded(handler), async (url) => {
      const key = randomUUID()
      for (const response of [await post(url, key), await post(url, key)]) {
        expect(response.status).toBe(201)
        expect([response.headers.get('x-a'), response.headers.get('x-b')]).toEqual(['1', '2'])
        expect(response.headers.get('x-dangling')).toBeNull()
        expect(response.headers.get('undefined')).toBeNull()
      }
    })
  })

  it('takes writeHead with headers undefined or null, as node:http does, setting only the status', async () => {
    const handler: Handler = (req, res) => {
      if (req.headers['x-headers'] === 'null') res.writeHead(202, 'Accepted', null as unknown as OutgoingHttpHeaders)
      else res.writeHead(201, undefined)
      res.end('ok')
    }
    await serve(guarded(handler), async (url) => {
      expect((await post(url, randomUUID())).status).toBe(201)
      const withNull = await fetch(`${url}/v1/charges`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID(), 'x-headers': 'null' }, body: '{}' })
      expect([withNull.status, withNull.statusText]).toEqual([202, 'Accepted'])
    })
  })

  it('ignores a writeHead after the first answer: a replacement goes out with its own status line', async () => {
    const handler: Handler = async (req, res) => {
      // The completion loses its fence, so a 409 replaces the handler's answer.
      await loseClaim(req)
      res.end('in one piece')
      res.writeHead(202, 'Late', { 'x-late': '1' })
    }
    await serve(guarded(handler), async (url) => {
      const response = await post(url, randomUUID())
      expect([response.status, response.statusText]).toEqual([409, 'Conflict'])
      expect(response.headers.get('x-late')).toBeNull()
    })
  })

  it('sends the headers of the first answer as they were when it ended: a header changed, added or removed after it is undone, on the wire and in the replay', async () => {
    const handler: Handler = (_req, res) => {
      res.setHeader('x-answer', 'first')
      res.setHeader('x-kept', ['a', 'b'])
      res.setHeader('content-type', 'application/json')
      res.statusCode = 201
      res.end('{"n":1}')
      // While the outcome is being stored: none of this reaches the client or the record.
      res.setHeader('x-answer', 'changed')
      res.setHeader('x-late', 'yes')
      res.removeHeader('content-type')
      res.statusCode = 500
    }
    await serve(guarded(handler), async (url) => {
      const key = randomUUID()
      for (const response of [await post(url, key), await post(url, key)]) {
        expect([response.status, response.headers.get('x-answer'), response.headers.get('x-kept'), response.headers.get('x-late'), response.headers.get('content-type'), await response.text()]).toEqual([
          201,
          'first',
          'a, b',
          null,
          'application/json',
          '{"n":1}',
        ])
      }
    })
  })

  it("keeps the headers set before the guard on a replacement answer and drops the handler's", async () => {
    const handler: Handler = async (req, res) => {
      res.setHeader('x-charge-id', 'ch_1')
      await loseClaim(req)
      res.end('in one piece')
    }
    await serve(guarded(handler), async (url) => {
      const response = await post(url, randomUUID())
      expect(response.status).toBe(409)
      expect(response.headers.get('access-control-allow-origin')).toBe('*')
      expect(response.headers.get('x-charge-id')).toBeNull()
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/)
    })
  })

  it('cuts a streamed response whose outcome could not be recorded, so the client cannot take it for a complete one (issue 23)', async () => {
    const errors: string[] = []
    const log = { info: () => {}, warn: () => {}, error: (_fields: LogFields, message: string) => void errors.push(message) }
    const handler: Handler = async (req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('sent ')
      await loseClaim(req)
      res.end('in pieces')
    }
    await serve(withIdempotency<Queryable>({ engine, scope: 'global', log }, async (req, res) => handler(req, res)), async (url) => {
      const response = await post(url, randomUUID())
      // The status line went out with the first chunk; the end never does.
      expect(response.status).toBe(200)
      await expect(response.text()).rejects.toThrow()
      expect(errors).toEqual(['oncely: the streamed 200 response could not be recorded (409); its connection is cut so the client retries with the same key'])
    })
  })

  it('keeps the headers set before the guard on an answer given before the handler runs', async () => {
    await serve(guarded((_req, res) => void res.end('never')), async (url) => {
      const response = await post(url, undefined)
      expect(response.status).toBe(400)
      expect(response.headers.get('access-control-allow-origin')).toBe('*')
    })
  })

  it('replays a header sent with several values with every value', async () => {
    const links = ['</v1/charges/ch_1>; rel="self"', '</v1/orders/o_1>; rel="order"']
    const handler: Handler = (_req, res) => {
      res.setHeader('link', links)
      res.writeHead(201, { 'content-type': 'application/json' })
      res.end('{}')
    }
    await serve(guarded(handler), async (url) => {
      const key = randomUUID()
      const first = await post(url, key)
      const again = await post(url, key)
      expect(again.headers.get('idempotent-replayed')).toBe('true')
      for (const response of [first, again]) expect(response.headers.get('link')).toBe(links.join(', '))
    })
  })

  it('warns of a second answer with the route as METHOD path, its query string left out, when the settler has no log fields', async () => {
    const warnings: Array<{ fields: LogFields; message: string }> = []
    const log = { info: () => {}, warn: (fields: LogFields, message: string) => void warnings.push({ fields, message }), error: () => {} }
    // As the Nest interceptor holds Nest's own reply when oncely answers instead of the handler.
    const listener: RequestListener = (_req, res) => {
      captureServerResponse(res, { settle: async () => null }, log)
      res.end('first')
      res.end('second')
    }
    await serve(listener, async (url) => {
      const response = await fetch(`${url}/v1/charges?token=secret`, { method: 'POST' })
      expect(await response.text()).toBe('first')
      expect(warnings).toEqual([{ fields: { route: 'POST /v1/charges' }, message: 'oncely: the handler answered twice; only its first answer is sent and stored' }])
    })
  })

  it('a throw after the handler ended its stream changes nothing: the end still goes out once its outcome is recorded', async () => {
    const settled: CapturedResponse[] = []
    // The record takes a moment, as a database write does: the throw comes while it is under way.
    const settle = (captured: CapturedResponse) => new Promise<null>((resolve) => setTimeout(() => resolve((settled.push(captured), null)), 20))
    const listener: RequestListener = (_req, res) => {
      const thrown = captureServerResponse(res, { settle, maxStoredBodyBytes: 100 }, { info: () => {}, warn: () => {}, error: () => {} })
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('all ')
      res.end('of it')
      void thrown(new Error('thrown after the end'))
    }
    await serve(listener, async (url) => {
      const response = await fetch(`${url}/v1/report`, { method: 'POST' })
      expect(await response.text()).toBe('all of it')
      expect(settled.map((captured) => captured.kind)).toEqual(['response'])
    })
  })

  it('a throw mid-stream cuts it once: the end that answers the error next is not taken for a second answer', async () => {
    const warnings: string[] = []
    const settled: CapturedResponse[] = []
    const closed = deferred()
    const listener: RequestListener = (_req, res) => {
      const thrown = captureServerResponse(res, { settle: async (captured) => (settled.push(captured), null) }, { info: () => {}, warn: (_fields, message) => void warnings.push(message), error: () => {} })
      res.once('close', () => closed.resolve())
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('half ')
      void thrown(new Error('the handler broke')).then(() => {
        // As Nest's exception filter ends a response that has started.
        res.end('of it')
      })
    }
    await serve(listener, async (url) => {
      const response = await fetch(`${url}/v1/report`, { method: 'POST' })
      await expect(response.text()).rejects.toThrow()
      await closed.promise
      expect(settled).toEqual([{ kind: 'unstorable', status: 200, reason: 'the 200 response was cut after 5 bytes of its streamed body (the handler threw: the handler broke), so it was not stored' }])
      expect(warnings).toEqual([])
    })
  })
})

