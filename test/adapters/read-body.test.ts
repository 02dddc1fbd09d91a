import { createServer, type Server } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { readRequestBody, type BoundedBody } from '../../src/adapters/node.js'
import { until } from '../helpers/until.js'

// What each request's read settled to, recorded on the server, in arrival order.
const outcomes: Array<BoundedBody | { kind: 'rejected'; code: string | undefined }> = []
let server: Server
let port: number

beforeAll(async () => {
  server = createServer((req, res) => {
    readRequestBody(req, 16).then(
      (body) => {
        outcomes.push(body)
        res.writeHead(body.kind === 'read' ? 200 : 413).end()
      },
      (error: NodeJS.ErrnoException) => void outcomes.push({ kind: 'rejected', code: error.code }),
    )
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  port = (server.address() as AddressInfo).port
})
afterAll(async () => {
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

/** Sends a chunked body of `chunks`, each a chunk; `end` sends the last chunk, `destroy` goes away instead. */
function sendChunked(chunks: string[], end: 'end' | 'destroy') {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.write('POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n')
  for (const chunk of chunks) socket.write(`${Buffer.byteLength(chunk).toString(16)}\r\n${chunk}\r\n`)
  socket.write(end === 'end' ? '0\r\n\r\n' : '', () => {
    if (end === 'destroy') socket.destroy()
  })
  return socket
}

describe('readRequestBody (oncely/node)', () => {
  it('reads a chunked body within its bound whole, and refuses one past it, dropping the rest', async () => {
    const start = outcomes.length
    const sockets = [sendChunked(['0123456789', '012345'], 'end')]
    await until(() => outcomes.length > start, 'the first read to settle')
    sockets.push(sendChunked(['0123456789', '0123456789', 'abc'], 'end'))
    await until(() => outcomes.length > start + 1, 'the second read to settle')
    for (const socket of sockets) socket.destroy()
    expect(outcomes.slice(start)).toEqual([
      { kind: 'read', bytes: Buffer.from('0123456789012345') },
      { kind: 'too-large', drained: true },
    ])
  })

  it('rejects when the client goes away in the middle of the body, instead of waiting for ever', async () => {
    const start = outcomes.length
    sendChunked(['01234'], 'destroy')
    await until(() => outcomes.length > start, 'the read to settle')
    expect(outcomes.slice(start)).toEqual([{ kind: 'rejected', code: 'ECONNRESET' }])
  })
})
