import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

export interface CuttingProxy {
  readonly url: string
  /** Connections accepted so far. */
  readonly connections: () => number
  /** Connections cut so far: the request reached the server, its response never reached the client. */
  readonly cuts: () => number
  close(): Promise<void>
}

/**
 * A real TCP proxy in front of `upstreamPort`. It forwards every request to the server; on the
 * first `cutCount` connections it cuts both sockets as soon as the server starts answering, so
 * the server has done the work and the client never sees the response.
 */
export async function startCuttingProxy(upstreamPort: number, cutCount: number): Promise<CuttingProxy> {
  let connections = 0
  let cuts = 0
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    connections++
    const cutThis = connections <= cutCount
    const upstream = net.connect(upstreamPort, '127.0.0.1')
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
      socket.on('error', () => {
        client.destroy()
        upstream.destroy()
      })
    }
    client.pipe(upstream)
    if (cutThis) {
      upstream.once('data', () => {
        cuts++
        client.resetAndDestroy()
        upstream.destroy()
      })
    } else {
      upstream.pipe(client)
    }
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const untrack = trackOpenHandle(`cutting proxy on port ${port}`)
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => connections,
    cuts: () => cuts,
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())))
      untrack()
    },
  }
}
