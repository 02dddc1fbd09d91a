import type { ReconcileHook } from '../ops/index.js'
import type { Outbox } from '../outbox/index.js'
import { chargeSucceededEvent } from './events.js'
import { withTransaction, type PoolLike, type Queryable } from '../store/postgres/index.js'
import type { ProviderCharge } from './provider.js'
import type { ProviderResult } from './provider-client.js'
import { chargeFrom, declined, providerMetadata } from './responses.js'
import { insertCharge } from './sql.js'

/**
 * The service's reconciler hook: it looks the charge up at the provider by
 * `metadata.order_id` (`GET /v1/charges?order_id=`), never by calling `POST /v1/charges`
 * (Invariant 12). Found: completes the key with the 201 the client would have got, rebuilt from
 * the provider's charge, with the charge row and the `charge.succeeded` event in the same
 * transaction, as the route does (Invariant 8). A
 * committed `charge` step needs no lookup: its stored result says what happened. Not found: does
 * nothing, so the claim stays suspended and a retry resumes it with the same provider key.
 */
export function chargeReconcileHook(options: { pool: PoolLike; providerUrl: string; outbox: Outbox; timeoutMs?: number }): ReconcileHook<Queryable> {
  const { pool, providerUrl } = options
  return async (claim) => {
    let result = claim.steps.charge as ProviderResult | undefined
    if (result === undefined) {
      const orderId = providerMetadata(claim.scope, claim.key, claim.claimId).order_id ?? ''
      const found = await findChargeByOrderId(providerUrl, orderId, options.timeoutMs ?? 10_000)
      if (found === undefined) return
      result = { outcome: 'charged', charge: found }
    }
    if (result.outcome === 'declined') {
      await claim.fail(await storedFrom(declined(result)))
      return
    }
    const { charge: providerCharge } = result
    const charge = chargeFrom({ amount: providerCharge.amount, currency: providerCharge.currency, customer: providerCharge.customer }, result)
    const response = { status: 201, headers: [['content-type', 'application/json']] as Array<[string, string]>, body: Buffer.from(JSON.stringify(charge)) }
    await withTransaction(pool, async (tx) => {
      await insertCharge(tx, claim.scope, claim.key, charge)
      await options.outbox.enqueue(tx, chargeSucceededEvent(charge))
      await claim.complete(response, { tx })
    })
  }
}

/** The provider's charge made for this operation, or undefined when it has none. */
export async function findChargeByOrderId(providerUrl: string, orderId: string, timeoutMs: number): Promise<ProviderCharge | undefined> {
  const url = new URL('/v1/charges', providerUrl)
  url.searchParams.set('order_id', orderId)
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) })
  if (response.status !== 200) throw new Error(`the provider answered ${response.status} to a charge lookup`)
  const { data } = (await response.json()) as { data?: ProviderCharge[] }
  return data?.find((charge) => charge.metadata.order_id === orderId)
}

async function storedFrom(response: Response) {
  return { status: response.status, headers: [...response.headers.entries()].filter(([name]) => name === 'content-type'), body: new Uint8Array(await response.arrayBuffer()) }
}
