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
export function createProviderCaller(baseUrl: string, timeoutMs: number): { charge(input: object, idempotencyKey: string | undefined): Promise<Charge>; close(): void } {
  const endpoint = new URL('/v1/charges', baseUrl)
  const agent = new Agent({ keepAlive: true, maxSockets: 64, timeout: 4000 })
  return {
    charge(input, idempotencyKey) {
      const body = JSON.stringify(input)
      const headers: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
      if (idempotencyKey !== undefined) headers['idempotency-key'] = idempotencyKey
      return new Promise<Charge>((resolve, reject) => {
        const outgoing = request(endpoint, { method: 'POST', agent, headers, timeout: timeoutMs }, (incoming) => {
          let text = ''
          incoming.setEncoding('utf8').on('data', (chunk: string) => (text += chunk))
          incoming.on('end', () => {
            const charge = incoming.statusCode === 200 ? (JSON.parse(text) as Partial<Charge>) : undefined
            if (typeof charge?.id === 'string' && typeof charge.created === 'number') resolve({ id: charge.id, created: charge.created })
            else reject(new Error(`the provider answered ${incoming.statusCode}: ${text.slice(0, 200)}`))
          })
          incoming.on('error', reject)
        })
        outgoing.on('timeout', () => outgoing.destroy(new Error(`the provider did not answer within ${timeoutMs} ms`)))
        outgoing.on('error', reject)
        outgoing.end(body)
      })
    },
    close: () => agent.destroy(),
  }
}
