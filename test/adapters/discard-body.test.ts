import { createServer, type IncomingMessage, type Server } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { discardRequestBody, type DiscardLimits } from '../../src/adapters/node.js'
import { until } from '../helpers/until.js'

// What each request's discard resolved to, in arrival order, recorded on the server: each test
// judges the discard itself, not what a client managed to read after it.
const outcomes: boolean[] = []
let limits: DiscardLimits = {}
let server: Server
let port: number

beforeAll(async () => {
  server = createServer((req: IncomingMessage, res) => {
    void discardRequestBody(req, limits).then((drained) => {
      outcomes.push(drained)
      res.writeHead(413, drained ? {} : { connection: 'close' }).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  port = (server.address() as AddressInfo).port
})
afterAll(async () => {
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

/** Opens a connection, declares `declared` bytes and sends `sent` of them; `end` closes the client's side after. */
function send(declared: number, sent: number, end: 'keep-open' | 'destroy' = 'keep-open') {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${declared}\r\n\r\n`)
  socket.write(Buffer.alloc(sent, 'x'), () => {
    if (end === 'destroy') socket.destroy()
  })
  return socket
}

describe('discardRequestBody', () => {
  it('resolves true once a body within its bounds has ended', async () => {
    limits = { maxBytes: 1024 * 1024, maxMs: 5_000 }
    const start = outcomes.length
    const socket = send(512 * 1024, 512 * 1024)
    await until(() => outcomes.length > start, 'the discard to settle')
    socket.destroy()
    expect(outcomes.slice(start)).toEqual([true])
  })

  it('gives up (false) past maxBytes, without waiting for the rest', async () => {
    limits = { maxBytes: 1000, maxMs: 60_000 }
    const start = outcomes.length
    const socket = send(10 * 1024 * 1024, 64 * 1024)
    await until(() => outcomes.length > start, 'the discard to settle')
    socket.destroy()
    expect(outcomes.slice(start)).toEqual([false])
  })

  it('gives up (false) after maxMs when the client stops sending', async () => {
    limits = { maxBytes: 1024 * 1024, maxMs: 200 }
    const start = outcomes.length
    const began = Date.now()
    const socket = send(100_000, 10)
    await until(() => outcomes.length > start, 'the discard to settle')
    socket.destroy()
    expect(outcomes.slice(start)).toEqual([false])
    expect(Date.now() - began).toBeGreaterThanOrEqual(190)
  })

  it('resolves false when the client goes away mid-body', async () => {
    limits = { maxBytes: 1024 * 1024, maxMs: 60_000 }
    const start = outcomes.length
    send(100_000, 10, 'destroy')
    await until(() => outcomes.length > start, 'the discard to settle')
    expect(outcomes.slice(start)).toEqual([false])
  })
})
