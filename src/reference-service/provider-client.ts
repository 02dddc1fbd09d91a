import { Agent as HttpAgent, request as httpRequest } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import type { ProviderCharge } from './provider.js'

/** What one charge attempt at the provider came to. Plain JSON: it is stored as a phase result. */
export type ProviderResult =
  | { outcome: 'charged'; charge: ProviderCharge }
  | { outcome: 'declined'; code: string; message: string }

/**
 * The provider did not answer with a charge or a decline: it failed (503), could not be reached,
 * timed out, or answered something unexpected. The charge may or may not have happened, so the
 * caller must retry with the same provider key, never with a new one.
 */
export class ProviderUnavailableError extends Error {
  override name = 'ProviderUnavailableError'
  /** The status to answer the client with: 503 when the provider said so, else 502. */
  readonly status: 502 | 503

  constructor(status: 502 | 503, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.status = status
  }
}

export interface ChargeRequest {
  amount: number
  currency: string
  customer: string
  metadata: Record<string, string>
}

export interface ProviderClient {
  /** Without `idempotencyKey` the provider cannot dedupe: only the `none` strategy calls it so. */
  createCharge(request: ChargeRequest, idempotencyKey: string | undefined): Promise<ProviderResult>
  /** Closes the connections kept open to the provider. */
  close(): void
}

/**
 * The provider's HTTP client. Connections are kept alive and reused across requests (a new
 * connection per charge costs the API process a handshake and a socket each time), at most
 * `maxSockets` at once: enough for every request in flight, since a charge holds its
 * connection only while the provider answers.
 */
export function createProviderClient(baseUrl: string, options: { timeoutMs: number; maxSockets?: number }): ProviderClient {
  const endpoint = new URL('/v1/charges', baseUrl)
  const secure = endpoint.protocol === 'https:'
  // An idle connection is closed before the provider's own keep-alive timeout (Node's default
  // is 5 s) could close it under a request just sent on it.
  const agentOptions = { keepAlive: true, maxSockets: options.maxSockets ?? 64, timeout: 4000 }
  const agent = secure ? new HttpsAgent(agentOptions) : new HttpAgent(agentOptions)
  return {
    async createCharge(request, idempotencyKey) {
      let answer: { status: number; text: string }
      try {
        answer = await post(endpoint, agent, JSON.stringify(request), idempotencyKey, options.timeoutMs)
      } catch (cause) {
        throw new ProviderUnavailableError(502, 'the payment provider could not be reached', { cause })
      }
      const body = parseJson(answer.text)
      if (answer.status === 200 && isCharge(body)) return { outcome: 'charged', charge: body }
      if (answer.status === 402) {
        const error = (body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error
        return {
          outcome: 'declined',
          code: typeof error?.code === 'string' ? error.code : 'card_declined',
          message: typeof error?.message === 'string' ? error.message : 'The card was declined.',
        }
      }
      if (answer.status === 503) throw new ProviderUnavailableError(503, 'the payment provider is unavailable')
      throw new ProviderUnavailableError(502, `the payment provider answered ${answer.status}`)
    },
    close() {
      agent.destroy()
    },
  }
}

/**
 * One POST on a kept-alive connection. Rejects when the connection fails, when the provider is
 * silent for `timeoutMs`, or when the answer is cut short: then the charge may or may not have
 * happened, and the caller retries with the same key.
 */
function post(endpoint: URL, agent: HttpAgent, body: string, idempotencyKey: string | undefined, timeoutMs: number): Promise<{ status: number; text: string }> {
  const headers: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
  if (idempotencyKey !== undefined) headers['idempotency-key'] = idempotencyKey
  return new Promise((resolve, reject) => {
    const send = endpoint.protocol === 'https:' ? httpsRequest : httpRequest
    const outgoing = send(endpoint, { method: 'POST', agent, headers }, (incoming) => {
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
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

function isCharge(value: unknown): value is ProviderCharge {
  return typeof value === 'object' && value !== null && typeof (value as { id?: unknown }).id === 'string'
}
