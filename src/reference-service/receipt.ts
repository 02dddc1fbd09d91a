import type { ChargeView } from './sql.js'

/** Asks the provider to send the customer a "you were charged" message. */
export type ReceiptSender = (receipt: { customer: string; charge: ChargeView }) => Promise<void>

/**
 * `POST /v1/messages` on the provider. Run as an at-most-once step (contract: "After a charge"):
 * recorded before the call, so a crash sends it once or never, never twice. A failure here is
 * swallowed by the caller's choice: a receipt lost is acceptable, a charge answered 5xx for it
 * is not.
 */
export function createReceiptSender(providerUrl: string, options: { timeoutMs: number }): ReceiptSender {
  const endpoint = new URL('/v1/messages', providerUrl)
  return async (receipt) => {
    const response = await fetch(endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(receipt),
      signal: AbortSignal.timeout(options.timeoutMs),
    })
    await response.arrayBuffer()
    if (!response.ok) throw new Error(`the provider answered ${response.status} to the receipt`)
  }
}
