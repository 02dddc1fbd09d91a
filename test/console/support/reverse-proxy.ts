import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * How the proxy sets the upstream request's headers, as nginx does:
 * - `default`: `proxy_pass` alone: `Host` becomes the upstream's `127.0.0.1:PORT`, every other
 *   header the client sent (its own `X-Forwarded-*` too) passes through;
 * - `forwarding`: the common `proxy_set_header` lines: the client's `Host` is kept, and
 *   `X-Forwarded-For` (appended), `X-Forwarded-Host`, `X-Forwarded-Proto` and `X-Real-IP` added.
 */
export type ProxyMode = 'default' | 'forwarding'

export interface ReverseProxy {
  /** `http://127.0.0.1:PORT` of the proxy. */
  readonly url: string
  close(): Promise<void>
}

/** A real reverse proxy on a free port of 127.0.0.1, forwarding every request to `upstream`. */
export async function startReverseProxy(upstream: string, mode: ProxyMode): Promise<ReverseProxy> {
  const target = new URL(upstream)
  const server: Server = createServer((incoming, outgoing) => {
    const headers: IncomingHttpHeaders = { ...incoming.headers, connection: 'close' }
    if (mode === 'default') headers.host = target.host
    else {
      const client = incoming.socket.remoteAddress ?? ''
      const claimed = incoming.headers['x-forwarded-for']
      headers['x-forwarded-for'] = claimed === undefined ? client : `${String(claimed)}, ${client}`
      headers['x-forwarded-host'] = incoming.headers.host ?? ''
      headers['x-forwarded-proto'] = 'http'
      headers['x-real-ip'] = client
    }
    const forwarded = request({ host: target.hostname, port: target.port, method: incoming.method, path: incoming.url, headers }, (answer) => {
      outgoing.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(outgoing)
    })
    forwarded.on('error', () => {
      if (!outgoing.headersSent) outgoing.writeHead(502)
      outgoing.end()
    })
    incoming.pipe(forwarded)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}
