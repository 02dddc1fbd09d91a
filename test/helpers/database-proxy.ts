import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../setup/guard-open-handles.js'

/**
 * A TCP proxy in front of PostgreSQL, owned by one test: it stands for a database server that
 * goes away and comes back, without touching the machine's shared server. `down()` cuts every
 * open connection (both sides see the socket die, as when a server stops) and stops listening,
 * so new connections are refused (ECONNREFUSED); `up()` listens again on the same port.
 * `cutNextAnswer()` cuts the next connection the server answers on, the moment it answers: the
 * statement ran (and, outside a transaction, committed), the client never hears of it.
 */
export interface DatabaseProxy {
  /** `url` with the host and port replaced by the proxy's. */
  readonly url: string
  readonly port: number
  down(): Promise<void>
  up(): Promise<void>
  /** Resolves once the next answer from the server has been cut instead of forwarded. */
  cutNextAnswer(): Promise<void>
  /** Connections accepted so far. */
  connections(): number
  close(): Promise<void>
}

export async function startDatabaseProxy(upstreamUrl: string): Promise<DatabaseProxy> {
  const upstream = new URL(upstreamUrl)
  const upstreamPort = Number(upstream.port || 5432)
  const sockets = new Set<net.Socket>()
  let accepted = 0
  let cut: (() => void) | undefined
  const server = net.createServer((client) => {
    accepted++
    const server = net.connect(upstreamPort, upstream.hostname)
    for (const socket of [client, server]) {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
      socket.on('error', () => {
        client.destroy()
        server.destroy()
      })
    }
    client.pipe(server)
    server.on('data', (chunk: Buffer) => {
      const cutNow = cut
      if (cutNow) {
        cut = undefined
        client.resetAndDestroy()
        server.destroy()
        cutNow()
        return
      }
      client.write(chunk)
    })
    client.on('close', () => server.destroy())
    server.on('close', () => client.destroy())
  })
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject)
        resolve()
      })
    })
  await listen(0)
  const port = (server.address() as AddressInfo).port
  const url = new URL(upstreamUrl)
  url.hostname = '127.0.0.1'
  url.port = String(port)
  const untrack = trackOpenHandle(`database proxy on port ${port}`)
  let listening = true

  async function down(): Promise<void> {
    if (!listening) return
    listening = false
    const closed = new Promise<void>((resolve) => server.close(() => resolve()))
    for (const socket of sockets) socket.resetAndDestroy()
    await closed
  }

  return {
    url: url.toString(),
    port,
    down,
    async up() {
      if (listening) return
      await listen(port)
      listening = true
    },
    cutNextAnswer: () => new Promise<void>((resolve) => (cut = resolve)),
    connections: () => accepted,
    async close() {
      await down()
      untrack()
    },
  }
}
