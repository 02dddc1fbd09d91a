import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

export interface ReceivedRequest {
  readonly method: string
  readonly url: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}

/** Answers one received request; `n` counts from 1. May write to `res` as it likes. */
export type Handler = (request: ReceivedRequest, res: http.ServerResponse, n: number) => void | Promise<void>

export interface TestServer {
  readonly url: string
  readonly port: number
  /** Every request received, in order of arrival (body read whole). */
  readonly requests: ReceivedRequest[]
  close(): Promise<void>
}

/** A real `node:http` server on port 0 that records every request before `handler` answers it. */
export async function startServer(handler: Handler): Promise<TestServer> {
  const requests: ReceivedRequest[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const request = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') }
      requests.push(request)
      Promise.resolve(handler(request, res, requests.length)).catch((error: unknown) => {
        res.destroy(error instanceof Error ? error : new Error(String(error)))
      })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const untrack = trackOpenHandle(`http server on port ${port}`)
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())))
      untrack()
    },
  }
}

/** Sends `status` with an optional body and headers. */
export function reply(res: http.ServerResponse, status: number, body = '', headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers })
  res.end(body)
}

/** A handler answering the n-th request with `statuses[n - 1]` (the last one repeats). */
export function statusSequence(...statuses: number[]): Handler {
  return (_request, res, n) => {
    const status = statuses[Math.min(n, statuses.length) - 1] ?? 500
    reply(res, status, JSON.stringify({ n, status }))
  }
}
