import { connect } from 'node:net'
import type { OutgoingRequest } from './http.js'

/** The request as HTTP/1.1 bytes, so the kit knows exactly where it ends. */
export function requestBytes(request: OutgoingRequest): Buffer {
  const body = request.body ?? Buffer.alloc(0)
  const lines = [
    `${request.method} ${request.url.pathname}${request.url.search} HTTP/1.1`,
    `host: ${request.url.host}`,
    ...request.headers.map(([name, value]) => `${name}: ${value}`),
    `content-length: ${body.length}`,
    'connection: close',
  ]
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body])
}

/** Writes the bytes to 127.0.0.1:port and waits for the connection to close, whatever comes back. */
export function sendRawAndWaitForClose(port: number, bytes: Buffer, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes))
    socket.setTimeout(timeoutMs, () => socket.destroy())
    socket.on('data', () => {})
    socket.on('error', () => {})
    socket.on('close', () => resolve())
  })
}
