import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { OperatorConsole } from './console-handler.js'

const MAX_BODY_BYTES = 64 * 1024

/**
 * Serves a console on `node:http` alone (`oncely console`), with no framework: each request is
 * turned into a fetch `Request`, answered by the console, and written back. Everything outside
 * the console's path is redirected to it.
 */
export async function serveConsole(operatorConsole: OperatorConsole, options: { host: string; port: number }): Promise<{ server: Server; url: string; close(): Promise<void> }> {
  const server = createServer((incoming, outgoing) => {
    void answer(operatorConsole, incoming, outgoing).catch(() => {
      if (!outgoing.headersSent) outgoing.writeHead(500)
      outgoing.end()
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port, options.host, () => resolve())
  })
  const { port } = server.address() as AddressInfo
  const host = options.host.includes(':') ? `[${options.host}]` : options.host
  return {
    server,
    url: `http://${host}:${port}${operatorConsole.basePath}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

async function answer(operatorConsole: OperatorConsole, incoming: IncomingMessage, outgoing: ServerResponse): Promise<void> {
  const url = new URL(incoming.url ?? '/', `http://${incoming.headers.host ?? 'localhost'}`)
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
  const response = await operatorConsole.fetch(request)
  outgoing.writeHead(response.status, Object.fromEntries(response.headers.entries()))
  outgoing.end(Buffer.from(await response.arrayBuffer()))
}
