import type { Handler } from 'hono'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { ProviderUnavailableError } from '../provider-client.js'
import { chargeFrom, declined, providerMetadata, providerUnavailable } from '../responses.js'
import { insertChargeStatement } from '../sql.js'
import { chargeSucceededEvent } from '../events.js'
import { CHARGES_ROUTE } from '../operations.js'
import { writeInOneFlight } from '../../store/postgres/index.js'

/**
 * NO IDEMPOTENCY (the benchmarks' baseline; never for production). The same business work as
 * `atomic-phases` — the provider's charge, the receipt, the charge row and its `charge.succeeded`
 * event in one transaction — with nothing in front of it: no key is read or stored, the provider
 * is called without a key, so a retried request charges again.
 */
export function noneRoute(deps: ServiceDeps): Handler<ServiceEnv> {
  return async (c) => {
    const userId = c.get('userId')
    const input = c.get('charge')
    const key = c.req.header('idempotency-key') ?? ''
    let result
    try {
      result = await deps.provider.createCharge({ ...input, metadata: providerMetadata(userId, key, crypto.randomUUID()) }, undefined)
    } catch (error) {
      if (error instanceof ProviderUnavailableError) return providerUnavailable(error.status, error.message, 'none')
      throw error
    }
    if (result.outcome === 'declined') return declined(result, 'none')
    const charge = chargeFrom(input, result)
    await deps.sendReceipt({ customer: input.customer, charge }).catch((error: unknown) => {
      deps.log.warn({ route: CHARGES_ROUTE, scope: userId }, `receipt for charge ${charge.id} not sent: ${(error as Error).message}`)
    })
    // Written as atomic-phases writes them, without a completion: BEGIN, the charge row, the
    // event and COMMIT in one flight, one round trip on the pipelining pool.
    const event = await deps.outbox.prepareEnqueue(chargeSucceededEvent(charge))
    await writeInOneFlight(deps.pool, [insertChargeStatement(userId, null, charge), event.statement])
    return c.json(charge, 201)
  }
}
