import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

/** A TCP proxy in front of a broker, to cut its connections without touching the shared broker. */
export interface BrokerProxy {
  readonly port: number
  /** Connections accepted and forwarded so far. */
  connections(): number
  /** Destroys every open connection and refuses new ones until `resume`. */
  cut(): void
  resume(): void
  close(): Promise<void>
}

export async function startBrokerProxy(upstreamPort: number): Promise<BrokerProxy> {
  let connections = 0
  let refusing = false
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    if (refusing) {
      client.resetAndDestroy()
      return
    }
    connections++
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
    upstream.pipe(client)
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const untrack = trackOpenHandle(`broker proxy on port ${port}`)
  return {
    port,
    connections: () => connections,
    cut() {
      refusing = true
      for (const socket of sockets) socket.resetAndDestroy()
    },
    resume() {
      refusing = false
    },
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())))
      untrack()
    },
  }
}
