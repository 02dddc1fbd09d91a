import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

export interface OutageProxy {
  /** `url` with its host and port replaced by the proxy's. */
  readonly url: string
  /** The database goes away: every open connection is reset and new ones are refused. */
  cut(): void
  /** The database is back: new connections are forwarded again. */
  restore(): void
  close(): Promise<void>
}

/** A real TCP proxy in front of the PostgreSQL server of `url`, to take the database away and bring it back. */
export async function startOutageProxy(url: string): Promise<OutageProxy> {
  const target = new URL(url)
  const sockets = new Set<net.Socket>()
  let down = false
  const server = net.createServer((client) => {
    if (down) return void client.resetAndDestroy()
    const upstream = net.connect(Number(target.port || 5432), target.hostname)
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
      socket.on('error', () => {
        client.destroy()
        upstream.destroy()
      })
    }
    client.pipe(upstream).pipe(client)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const untrack = trackOpenHandle(`outage proxy on port ${port}`)
  const proxied = new URL(url)
  proxied.hostname = '127.0.0.1'
  proxied.port = String(port)
  return {
    url: proxied.toString(),
    cut() {
      down = true
      for (const socket of sockets) socket.resetAndDestroy()
    },
    restore() {
      down = false
    },
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())))
      untrack()
    },
  }
}
