import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { invalid } from '../../option-validation.js'
import { isLoopbackAddress, isLoopbackHost, notePeer } from './console-access.js'
import { buildConsole, type ConsoleOptions, type OperatorConsole } from './console-handler.js'

const MAX_BODY_BYTES = 64 * 1024

export interface ServeConsoleOptions extends Omit<ConsoleOptions, 'token'> {
  /**
   * Required from every visitor when set (see `createConsole`). Without it the console binds a
   * loopback interface only, and answers only a request whose socket is loopback at both ends,
   * with no proxy header. (Default: none)
   */
  token?: string | undefined
  /** The interface to bind; without `token`, only `127.0.0.1` (or another 127.x), `::1` or `localhost`. (Default: `127.0.0.1`) */
  host?: string
  /** The port; 0 picks a free one. (Default: 4000) */
  port?: number
}

export interface ServedConsole {
  readonly server: Server
  /** `http://HOST:PORT/console`. */
  readonly url: string
  close(): Promise<void>
}

/**
 * Serves the console on a `node:http` listener of its own (`oncely console`, the reference
 * service's loopback console). Each request becomes a fetch `Request` that carries the socket it
 * came in on, which is how a console without a token tells a local operator: by the socket,
 * never by `Host` or `X-Forwarded-*`. Everything outside the console's path is redirected to it.
 *
 * @example
 * ```ts
 * import { serveConsole } from 'oncely/ops'
 * const served = await serveConsole({ database: { pool }, port: 4000 })
 * console.log(`console on ${served.url}`)
 * ```
 */
export async function serveConsole(options: ServeConsoleOptions): Promise<ServedConsole> {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const host = options.host ?? '127.0.0.1'
  const port = options.port ?? 4000
  const token = options.token === '' ? undefined : options.token
  if (token === undefined && !isLoopbackHost(host)) {
    throw invalid('host', 'must be a loopback address (127.0.0.1, ::1 or localhost) for a console without a token: it shows every user\'s stored responses', host)
  }
  if (!Number.isSafeInteger(port) || port < 0 || port > 65535) throw invalid('port', 'must be an integer from 0 to 65535', port)
  const operatorConsole = buildConsole({ ...options, token }, token === undefined ? 'loopback listener' : 'token')
  const server = createServer((incoming, outgoing) => {
    void answer(operatorConsole, incoming, outgoing).catch(() => {
      if (!outgoing.headersSent) outgoing.writeHead(500)
      outgoing.end()
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host.replace(/^\[|\]$/g, ''), () => resolve())
  })
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.closeAllConnections()
    })
  const bound = server.address() as AddressInfo
  // `localhost` is a name: whatever it resolved to must be loopback too.
  if (token === undefined && !isLoopbackAddress(bound.address)) {
    await close()
    throw invalid('host', `resolved to ${bound.address}, not a loopback address`, host)
  }
  const shown = bound.address.includes(':') ? `[${bound.address}]` : bound.address
  return { server, url: `http://${shown}:${bound.port}${operatorConsole.basePath}`, close }
}

async function answer(operatorConsole: OperatorConsole, incoming: IncomingMessage, outgoing: ServerResponse): Promise<void> {
  // The URL's host is the socket's own address, not the client's Host header.
  const url = new URL(incoming.url ?? '/', `http://${localOrigin(incoming)}`)
  if (url.pathname !== operatorConsole.basePath && !url.pathname.startsWith(`${operatorConsole.basePath}/`)) {
    outgoing.writeHead(302, { location: operatorConsole.basePath }).end()
    return
  }
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of incoming) {
    size += (chunk as Buffer).length
    if (size > MAX_BODY_BYTES) {
      outgoing.writeHead(413, { connection: 'close' }).end()
      return
    }
    chunks.push(chunk as Buffer)
  }
  const headers = new Headers()
  for (const [name, value] of Object.entries(incoming.headers)) {
    if (value === undefined) continue
    for (const item of Array.isArray(value) ? value : [value]) headers.append(name, item)
  }
  const method = incoming.method ?? 'GET'
  const request = new Request(url, { method, headers, ...(method === 'GET' || method === 'HEAD' ? {} : { body: Buffer.concat(chunks) }) })
  notePeer(request, { localAddress: incoming.socket.localAddress, remoteAddress: incoming.socket.remoteAddress })
  const response = await operatorConsole.fetch(request)
  outgoing.writeHead(response.status, Object.fromEntries(response.headers.entries()))
  outgoing.end(Buffer.from(await response.arrayBuffer()))
}

function localOrigin(incoming: IncomingMessage): string {
  const address = incoming.socket.localAddress ?? '127.0.0.1'
  const host = address.includes(':') ? `[${address}]` : address
  return `${host}:${incoming.socket.localPort ?? 80}`
}
