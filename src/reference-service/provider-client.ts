import type { ProviderAnswer, ProviderHttp } from './provider-http.js'
import type { ProviderCharge } from './provider.js'

/** What one charge attempt at the provider came to. Plain JSON: it is stored as a step result. */
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
 * The provider's charge client, over the connections of `http` (`createProviderHttp`), which it
 * shares with the receipt sender.
 */
export function createProviderClient(http: ProviderHttp, options: { timeoutMs: number }): ProviderClient {
  return {
    async createCharge(request, idempotencyKey) {
      let answer: ProviderAnswer
      try {
        answer = await http.post('/v1/charges', JSON.stringify(request), { timeoutMs: options.timeoutMs, idempotencyKey })
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
      http.close()
    },
  }
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
