import { request } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Server } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { countConstructions } from '../helpers/count-constructions.js'
import { sendOversizedBody } from '../helpers/oversized-body.js'

// Counts every web `Request` built in this module graph. `@hono/node-server` takes `Request`
// from the global when it loads, so the counter goes in before it is imported.
const requests = countConstructions('Request')
const { serve } = await import('@hono/node-server')
const { Hono } = await import('hono')
const { bodyLimitByLength } = await import('../../src/reference-service/body-limit.js')
const { requestText } = await import('../../src/reference-service/request-text.js')

let server: Server
let port: number

beforeAll(async () => {
  const app = new Hono()
  app.post('/echo', bodyLimitByLength(64, (c, drained) => c.text('too large', 413, drained ? {} : { connection: 'close' })), async (c) => c.text(`read ${(await requestText(c)).length}`))
  server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server))
  })
  port = (server.address() as AddressInfo).port
})

afterAll(async () => {
  requests.restore()
  await new Promise((resolve) => server.close(resolve))
})

/** POSTs `body`, with its Content-Length or chunked, and resolves to the status and text. */
function post(body: string, framing: 'length' | 'chunked'): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const headers = framing === 'length' ? { 'content-length': Buffer.byteLength(body) } : { 'transfer-encoding': 'chunked' }
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/echo', headers }, (res) => {
      let text = ''
      res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
    })
    req.on('error', reject)
    if (framing === 'chunked') for (let i = 0; i < body.length; i += 16) req.write(body.slice(i, i + 16))
    else req.write(body)
    req.end()
  })
}

describe('the service body limit (issue 21)', () => {
  it('judges a body with a Content-Length by its header, and never builds a web Request for it', async () => {
    requests.reset()
    expect(await post('x'.repeat(64), 'length')).toEqual({ status: 200, text: 'read 64' })
    expect(await post('x'.repeat(65), 'length')).toEqual({ status: 413, text: 'too large' })
    expect(requests.count()).toBe(0)
  })

  it('counts a chunked body as it arrives, as Hono’s own limit does', async () => {
    expect(await post('x'.repeat(64), 'chunked')).toEqual({ status: 200, text: 'read 64' })
    expect(await post('x'.repeat(200), 'chunked')).toEqual({ status: 413, text: 'too large' })
  })

  it('reads a refused body to its end before it answers: the 413 arrives and the connection carries the next request', async () => {
    const head = 'POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n'
    const followUp = 'POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'
    expect(await sendOversizedBody(port, head, 2 * 1024 * 1024, followUp)).toEqual({ statuses: [413, 200], writeError: undefined })
  })

  it('reads a refused chunked body to its end too, without a web Request: a streamed upload gets its 413, not a reset, and the connection carries the next request', async () => {
    const head = 'POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n'
    const followUp = 'POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'
    requests.reset()
    expect(await sendOversizedBody(port, head, 2 * 1024 * 1024, followUp, 'chunked')).toEqual({ statuses: [413, 200], writeError: undefined })
    expect(requests.count()).toBe(0)
  })
})
