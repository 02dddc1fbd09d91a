import { Agent as HttpAgent, request as httpRequest } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'

/** One answer of the provider, read whole. */
export interface ProviderAnswer {
  status: number
  text: string
}

/** JSON POSTs to the provider over connections kept alive and shared by every caller. */
export interface ProviderHttp {
  /**
   * Sends `body` to `path`. Rejects when the connection fails, when the provider is silent for
   * `timeoutMs`, or when the answer is cut short: then the call may or may not have happened.
   */
  post(path: string, body: string, options: { timeoutMs: number; idempotencyKey?: string | undefined }): Promise<ProviderAnswer>
  /** Closes the kept-alive connections. */
  close(): void
}

/**
 * The provider's connections. A new connection per call costs the API process a handshake and a
 * socket each time, and `fetch` a web-stream pipeline and an `AbortSignal` timer per request
 * (issue 21: 15–22 % of the process): node:http on a keep-alive agent costs neither, and the
 * socket's own idle timer bounds a silent provider. At most `maxSockets` at once: enough for
 * every request in flight, since a call holds its connection only while the provider answers.
 */
export function createProviderHttp(baseUrl: string, options: { maxSockets?: number } = {}): ProviderHttp {
  const base = new URL(baseUrl)
  const secure = base.protocol === 'https:'
  // An idle connection is closed before the provider's own keep-alive timeout (Node's default
  // is 5 s) could close it under a request just sent on it.
  const agentOptions = { keepAlive: true, maxSockets: options.maxSockets ?? 64, timeout: 4000 }
  const agent = secure ? new HttpsAgent(agentOptions) : new HttpAgent(agentOptions)
  const send = secure ? httpsRequest : httpRequest
  // Each path's URL taken apart once: handed a URL, node:http converts it to options on every call.
  const endpoints = new Map<string, { protocol: string; hostname: string; port: string; path: string }>()
  return {
    post(path, body, { timeoutMs, idempotencyKey }) {
      let endpoint = endpoints.get(path)
      if (endpoint === undefined) {
        const url = new URL(path, base)
        endpoint = { protocol: url.protocol, hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'), port: url.port, path: `${url.pathname}${url.search}` }
        endpoints.set(path, endpoint)
      }
      const headers: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
      if (idempotencyKey !== undefined) headers['idempotency-key'] = idempotencyKey
      return new Promise((resolve, reject) => {
        const outgoing = send({ ...endpoint, method: 'POST', agent, headers }, (incoming) => {
          const chunks: Buffer[] = []
          incoming.on('data', (chunk: Buffer) => chunks.push(chunk))
          incoming.on('end', () => resolve({ status: incoming.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }))
          incoming.on('close', () => {
            if (!incoming.complete) reject(new Error('the provider closed the connection before its answer was complete'))
          })
        })
        outgoing.setTimeout(timeoutMs, () => outgoing.destroy(new Error(`the provider did not answer within ${timeoutMs} ms`)))
        outgoing.on('error', reject)
        outgoing.end(body)
      })
    },
    close() {
      agent.destroy()
    },
  }
}
