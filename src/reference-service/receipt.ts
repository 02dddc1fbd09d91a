import type { ProviderHttp } from './provider-http.js'
import type { ChargeView } from './sql.js'

/** Asks the provider to send the customer a "you were charged" message. */
export type ReceiptSender = (receipt: { customer: string; charge: ChargeView }) => Promise<void>

/**
 * `POST /v1/messages` on the provider, over the charge client's kept-alive connections. Run as an
 * at-most-once step (contract: "After a charge"): recorded before the call, so a crash sends it
 * once or never, never twice. A failure here is swallowed by the caller's choice: a receipt lost
 * is acceptable, a charge answered 5xx for it is not.
 */
export function createReceiptSender(http: ProviderHttp, options: { timeoutMs: number }): ReceiptSender {
  return async (receipt) => {
    const answer = await http.post('/v1/messages', JSON.stringify(receipt), { timeoutMs: options.timeoutMs })
    if (answer.status < 200 || answer.status > 299) throw new Error(`the provider answered ${answer.status} to the receipt`)
  }
}
