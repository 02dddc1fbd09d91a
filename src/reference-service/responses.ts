import { hash, randomBytes } from 'node:crypto'
import type { ChargeInput } from './charge-input.js'
import type { OperationState } from '../adapters/hono.js'
import { problem } from './problem.js'
import type { ProviderResult } from './provider-client.js'
import type { ChargeView } from './sql.js'

/** A new charge id: `ch_` and 24 hex characters. */
export function newChargeId(): string {
  return `ch_${randomBytes(12).toString('hex')}`
}

export const CHARGE_ID = /^ch_[0-9a-f]{24}$/

/**
 * The service's charge id for a provider charge: derived, not random, so a take-over that resumes
 * after the provider step builds the same charge the receipt and the event already named.
 */
export function chargeIdFor(providerChargeId: string): string {
  return `ch_${hash('sha256', providerChargeId, 'hex').slice(0, 24)}`
}

export function chargeFrom(input: ChargeInput, result: Extract<ProviderResult, { outcome: 'charged' }>): ChargeView {
  return {
    id: chargeIdFor(result.charge.id),
    object: 'charge',
    amount: input.amount,
    currency: input.currency,
    customer: input.customer,
    status: 'succeeded',
    provider_charge: result.charge.id,
    created: result.charge.created,
  }
}

/**
 * 402: the card was declined. Stored and replayed like any completed response: the same key gets
 * this answer again, and the provider was called, so a new key is not called safe. `state` is
 * what the strategy keeps of the key (`failed` for oncely's, which stores a 4xx after a step).
 */
export function declined(result: Extract<ProviderResult, { outcome: 'declined' }>, state: OperationState = 'failed'): Response {
  return problem({ type: 'card-declined', title: 'Card declined', status: 402, detail: result.message, retry_same_key: false, new_key_safe: false, operation_state: state, code: result.code })
}

/**
 * 502/503: the provider failed or could not be reached; the key stays retryable. The charge may
 * have been attempted (a 502 after the provider took it, a timeout), so a new key is never called
 * safe: only the same key reaches the provider with the same provider key. `state` is what the
 * strategy keeps of the key (`suspended` for oncely's: the adapter keeps the claim for a retry).
 */
export function providerUnavailable(status: 502 | 503, detail: string, state: OperationState): Response {
  return problem(
    { type: 'provider-unavailable', title: 'Payment provider unavailable', status, detail: `${detail}; retry with the same Idempotency-Key`, retry_same_key: true, new_key_safe: false, operation_state: state },
    { 'retry-after': '1' },
  )
}

/** The provider's metadata for one operation: `order_id` finds it again for reconciliation. */
export function providerMetadata(userId: string, key: string, claimId: string): Record<string, string> {
  return { order_id: `ord_${claimId}`, user_id: userId, idempotency_key: key }
}
