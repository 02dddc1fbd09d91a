import { request as httpRequest, type IncomingHttpHeaders } from 'node:http'
import { request as httpsRequest } from 'node:https'

/** One request the kit sends: headers as pairs, so a name can repeat (two Idempotency-Key lines). */
export interface OutgoingRequest {
  readonly method: string
  readonly url: URL
  readonly headers: ReadonlyArray<readonly [string, string]>
  readonly body: Buffer | undefined
}

/** A response as the wire carried it: the body's bytes undecoded, so a replay compares byte for byte. */
export interface Received {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly body: Buffer
}

/** A request on its own connection, its last body byte held back until `release()`. */
export interface HeldRequest {
  /** Settles once everything but the last byte is on the socket. */
  readonly written: Promise<void>
  release(): void
  readonly response: Promise<Received>
}

/**
 * Sends a request on a connection of its own (`agent: false`: a fresh socket, never a pooled one,
 * so N requests are N real parallel connections). With `hold`, all but the last body byte is
 * written and the rest waits for `release()`: a burst released together reaches the server as
 * close to simultaneously as TCP allows.
 */
export function openRequest(request: OutgoingRequest, options: { timeoutMs: number; hold: boolean }): HeldRequest {
  const send = request.url.protocol === 'https:' ? httpsRequest : httpRequest
  const client = send(request.url, { method: request.method, agent: false, timeout: options.timeoutMs })
  const grouped = new Map<string, string[]>()
  for (const [name, value] of request.headers) grouped.set(name.toLowerCase(), [...(grouped.get(name.toLowerCase()) ?? []), value])
  for (const [name, values] of grouped) client.setHeader(name, values.length === 1 ? (values[0] ?? '') : values)
  const body = request.body ?? Buffer.alloc(0)
  if (body.length > 0 || request.method !== 'GET') client.setHeader('content-length', String(body.length))
  client.on('timeout', () => client.destroy(new Error(`no complete answer within ${options.timeoutMs} ms`)))

  const response = new Promise<Received>((resolve, reject) => {
    client.on('error', reject)
    client.on('response', (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('error', reject)
      res.on('aborted', () => reject(new Error('the connection closed before the answer was complete')))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }))
    })
  })
  // A rejected response is read by the caller; this only keeps an unread one from crashing the process.
  response.catch(() => {})

  if (!options.hold || body.length === 0) {
    client.end(body)
    return { written: Promise.resolve(), release: () => {}, response }
  }
  const written = new Promise<void>((resolve) => {
    client.write(body.subarray(0, body.length - 1), () => resolve())
    client.once('error', () => resolve())
  })
  let released = false
  return {
    written,
    release() {
      if (released) return
      released = true
      client.end(body.subarray(body.length - 1))
    },
    response,
  }
}

export function sendRequest(request: OutgoingRequest, timeoutMs: number): Promise<Received> {
  return openRequest(request, { timeoutMs, hold: false }).response
}

/** The value of a response header, repeated ones joined. */
export function headerOf(received: Received, name: string): string | undefined {
  const value = received.headers[name.toLowerCase()]
  return Array.isArray(value) ? value.join(', ') : value
}
