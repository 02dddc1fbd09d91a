import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

/** How the proxy treats traffic: forward it, cut every connection (Redis "stopped"), or swallow it (Redis hanging). */
export type ProxyMode = 'forward' | 'down' | 'hang'

export interface RedisProxy {
  readonly port: number
  /** Switches the mode; `down` and `hang` also end or freeze the connections open now. */
  set(mode: ProxyMode): void
  close(): Promise<void>
}

/**
 * A TCP proxy of the test's own in front of the machine's Redis: the outage it simulates is
 * ours alone, and the shared Redis is never stopped.
 */
export async function startRedisProxy(upstream: { host: string; port: number }): Promise<RedisProxy> {
  let mode: ProxyMode = 'forward'
  const pairs = new Set<{ client: net.Socket; server: net.Socket }>()
  const server = net.createServer((client) => {
    if (mode === 'down') return void client.resetAndDestroy()
    const upstreamSocket = net.connect(upstream.port, upstream.host)
    const pair = { client, server: upstreamSocket }
    pairs.add(pair)
    const end = () => {
      pairs.delete(pair)
      client.destroy()
      upstreamSocket.destroy()
    }
    client.on('error', end).on('close', end)
    upstreamSocket.on('error', end).on('close', end)
    client.on('data', (chunk: Buffer) => {
      if (mode === 'forward') upstreamSocket.write(chunk)
    })
    upstreamSocket.on('data', (chunk: Buffer) => {
      if (mode === 'forward') client.write(chunk)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const untrack = trackOpenHandle(`Redis proxy on port ${port}`)
  return {
    port,
    set(next: ProxyMode) {
      mode = next
      if (next === 'down') for (const pair of pairs) pair.client.resetAndDestroy()
    },
    async close() {
      for (const pair of pairs) {
        pair.client.destroy()
        pair.server.destroy()
      }
      await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())))
      untrack()
    },
  }
}
