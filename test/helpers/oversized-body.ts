import { connect, type Socket } from 'node:net'

export interface OversizedExchange {
  /** The status code of every response read on the connection, in order. */
  statuses: number[]
  /** The error code a write met (`EPIPE`, `ECONNRESET`), if one did. */
  writeError: string | undefined
}

const write = (socket: Socket, bytes: Buffer | string) =>
  new Promise<void>((resolve, reject) => socket.write(bytes, (error) => (error ? reject(error) : resolve())))

/**
 * Sends a body of `bodyBytes` on one keep-alive connection the way a client that does not wait
 * for an early answer sends it: the head and the first 128 KiB, a pause (long enough for a server
 * that answers and closes at once to have done so), then the rest; then `followUp`, a second
 * request that closes the connection. A server that reads the refused body to its end answers
 * both; one that closes early makes a write fail. `framing` `'chunked'` sends the body with
 * `Transfer-Encoding: chunked`, each 128 KiB piece a chunk, as a streamed `fetch` body goes.
 */
export async function sendOversizedBody(port: number, head: string, bodyBytes: number, followUp: string, framing: 'length' | 'chunked' = 'length'): Promise<OversizedExchange> {
  const socket = connect(port, '127.0.0.1')
  let received = ''
  socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')))
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  socket.on('error', () => {})
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject))
  let writeError: string | undefined
  try {
    const chunked = framing === 'chunked'
    await write(socket, `${head}${chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${bodyBytes}`}\r\n\r\n`)
    const piece = Buffer.alloc(128 * 1024, 'x')
    const send = (bytes: Buffer) => write(socket, chunked ? Buffer.concat([Buffer.from(`${bytes.length.toString(16)}\r\n`), bytes, Buffer.from('\r\n')]) : bytes)
    await send(piece.subarray(0, Math.min(piece.length, bodyBytes)))
    await new Promise((resolve) => setTimeout(resolve, 150))
    for (let sent = piece.length; sent < bodyBytes; sent += piece.length) await send(piece.subarray(0, Math.min(piece.length, bodyBytes - sent)))
    if (chunked) await write(socket, '0\r\n\r\n')
    await write(socket, followUp)
  } catch (error) {
    writeError = (error as NodeJS.ErrnoException).code ?? String(error)
    socket.destroy()
  }
  await closed
  return { statuses: [...received.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((match) => Number(match[1])), writeError }
}
