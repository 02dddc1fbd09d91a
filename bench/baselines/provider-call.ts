import { Agent, request } from 'node:http'

/** The fake provider's charge, as much of it as the baselines answer with. */
export interface Charge {
  id: string
  created: number
}

/**
 * `POST /v1/charges` on the fake provider (`oncely provider`) over kept-alive connections, as a
 * careful Express app would call a payment API: node:http, one agent, a socket timeout and no
 * timer of its own per request. Rejects on anything but a 200 with a charge.
 */
export function createProviderCaller(
  baseUrl: string,
  timeoutMs: number,
): { charge(input: object, idempotencyKey: string | undefined): Promise<Charge>; receipt(message: object): Promise<void>; close(): void } {
  const agent = new Agent({ keepAlive: true, maxSockets: 64, timeout: 4000 })
  const post = (path: string, payload: object, idempotencyKey?: string) => {
    const body = JSON.stringify(payload)
    const headers: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
    if (idempotencyKey !== undefined) headers['idempotency-key'] = idempotencyKey
    return new Promise<{ status: number; text: string }>((resolve, reject) => {
      const outgoing = request(new URL(path, baseUrl), { method: 'POST', agent, headers, timeout: timeoutMs }, (incoming) => {
        let text = ''
        incoming.setEncoding('utf8').on('data', (chunk: string) => (text += chunk))
        incoming.on('end', () => resolve({ status: incoming.statusCode ?? 0, text }))
        incoming.on('error', reject)
      })
      outgoing.on('timeout', () => outgoing.destroy(new Error(`the provider did not answer within ${timeoutMs} ms`)))
      outgoing.on('error', reject)
      outgoing.end(body)
    })
  }
  return {
    async charge(input, idempotencyKey) {
      const { status, text } = await post('/v1/charges', input, idempotencyKey)
      const charge = status === 200 ? (JSON.parse(text) as Partial<Charge>) : undefined
      if (typeof charge?.id === 'string' && typeof charge.created === 'number') return { id: charge.id, created: charge.created }
      throw new Error(`the provider answered ${status}: ${text.slice(0, 200)}`)
    },
    /** `POST /v1/messages`: the reference service's receipt, the second provider call of its charge. */
    async receipt(message) {
      const { status, text } = await post('/v1/messages', message)
      if (status < 200 || status > 299) throw new Error(`the provider answered ${status} to the receipt: ${text.slice(0, 200)}`)
    },
    close: () => agent.destroy(),
  }
}
