import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js'

// The tests' one TCP proxy, against an echo server of this file's own: every fault it makes is
// what its users (PostgreSQL, Redis, brokers, HTTP) rely on. No PostgreSQL in it: one pass only
// would do, but it is cheap enough to run in both.
let echo: net.Server
let received: Buffer[] = []
beforeAll(async () => {
  echo = net.createServer((socket) => {
    socket.on('error', () => {})
    socket.on('data', (chunk: Buffer) => {
      received.push(chunk)
      socket.write(Buffer.concat([Buffer.from('echo:'), chunk]))
    })
  })
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve))
})
afterAll(async () => {
  await new Promise((resolve) => echo.close(resolve))
})

let proxy: TcpProxy
const sockets: net.Socket[] = []
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy()
  await proxy.close()
  received = []
})

/** A client connected through the proxy; `next()` is its next chunk, or how the connection ended. */
async function connect(): Promise<{ socket: net.Socket; send(text: string): void; next(timeoutMs?: number): Promise<string> }> {
  const socket = net.connect(proxy.port, '127.0.0.1')
  sockets.push(socket)
  const chunks: string[] = []
  let ended: string | undefined
  let wake: (() => void) | undefined
  socket.on('data', (chunk: Buffer) => {
    chunks.push(chunk.toString())
    wake?.()
  })
  socket.on('error', (error: NodeJS.ErrnoException) => {
    ended ??= error.code ?? 'error'
    wake?.()
  })
  socket.on('close', () => {
    ended ??= 'closed'
    wake?.()
  })
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject))
  return {
    socket,
    send: (text) => void socket.write(text),
    async next(timeoutMs = 5000) {
      const deadline = setTimeout(() => wake?.(), timeoutMs)
      while (chunks.length === 0 && ended === undefined) {
        await new Promise<void>((resolve) => (wake = resolve))
        if (chunks.length === 0 && ended === undefined) break
      }
      clearTimeout(deadline)
      return chunks.shift() ?? ended ?? 'nothing'
    },
  }
}

describe('the TCP proxy', () => {
  it('forwards both ways, and counts the connections it forwarded', async () => {
    proxy = await startTcpProxy((echo.address() as AddressInfo).port)
    const client = await connect()
    client.send('hello')
    expect(await client.next()).toBe('echo:hello')
    await connect()
    expect(proxy.connections()).toBe(2)
    expect(proxy.url).toBe(`http://127.0.0.1:${proxy.port}`)
  })

  it('cut: open connections are reset and new ones refused until restore', async () => {
    proxy = await startTcpProxy(`redis://127.0.0.1:${(echo.address() as AddressInfo).port}`)
    const open = await connect()
    proxy.cut()
    expect(await open.next()).toBe('ECONNRESET')
    // Refused: reset at once, whether or not the client saw its connect complete first.
    const refused = net.connect(proxy.port, '127.0.0.1')
    sockets.push(refused)
    expect(await new Promise((resolve) => refused.once('error', (error: NodeJS.ErrnoException) => resolve(error.code)))).toBe('ECONNRESET')
    proxy.restore()
    const again = await connect()
    again.send('back')
    expect(await again.next()).toBe('echo:back')
    expect(proxy.connections()).toBe(2)
  })

  it('stall: requests still reach the server, no answer comes back until restore', async () => {
    proxy = await startTcpProxy((echo.address() as AddressInfo).port)
    const client = await connect()
    proxy.stall()
    client.send('unanswered')
    expect(await client.next(300)).toBe('nothing')
    expect(Buffer.concat(received).toString()).toBe('unanswered')
    proxy.restore()
    client.send('answered')
    expect(await client.next()).toBe('echo:answered')
  })

  it('cutNextAnswer: queued cuts take one answer each, the request having run; with `to`, only after that request', async () => {
    proxy = await startTcpProxy((echo.address() as AddressInfo).port)
    const cuts = [proxy.cutNextAnswer(), proxy.cutNextAnswer()]
    for (const text of ['one', 'two']) {
      const client = await connect()
      client.send(text)
      expect(await client.next()).toBe('ECONNRESET')
    }
    await Promise.all(cuts)
    expect(proxy.cuts()).toBe(2)
    const client = await connect()
    const marked = proxy.cutNextAnswer({ to: 'COMMIT' })
    client.send('BEGIN')
    expect(await client.next()).toBe('echo:BEGIN')
    client.send('COMMIT')
    expect(await client.next()).toBe('ECONNRESET')
    await marked
    expect(Buffer.concat(received).toString()).toBe('onetwoBEGINCOMMIT')
  })

  it('holdNext: the marked request waits in the proxy and lands on release, even after its client left', async () => {
    proxy = await startTcpProxy((echo.address() as AddressInfo).port)
    const client = await connect()
    const late = proxy.holdNext('claim')
    client.send('claim-1')
    await late.held
    client.socket.destroy()
    expect(Buffer.concat(received).toString()).toBe('')
    late.release()
    await expect.poll(() => Buffer.concat(received).toString()).toBe('claim-1')
  })
})
