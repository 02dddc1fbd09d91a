import type { Handler } from 'hono'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { ProviderUnavailableError } from '../provider-client.js'
import { chargeFrom, declined, providerMetadata, providerUnavailable } from '../responses.js'
import { insertCharge } from '../sql.js'

/**
 * NO IDEMPOTENCY (the benchmarks' baseline; never for production). The same business work as
 * `atomic-phases` — one provider call, the charge row — with nothing in front of it: no key is
 * read or stored, the provider is called without a key, so a retried request charges again.
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
      if (error instanceof ProviderUnavailableError) return providerUnavailable(error.status, error.message)
      throw error
    }
    if (result.outcome === 'declined') return declined(result)
    const charge = chargeFrom(input, result)
    await insertCharge(deps.pool, userId, null, charge)
    return c.json(charge, 201)
  }
}
