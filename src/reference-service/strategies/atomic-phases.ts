import type { Handler, MiddlewareHandler } from 'hono'
import { idempotency, requestHeader } from '../../adapters/hono.js'
import type { Queryable } from '../../store/postgres/index.js'
import { userFromAuthorization } from '../auth.js'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { ProviderUnavailableError, type ProviderResult } from '../provider-client.js'
import { chargeFrom, declined, providerMetadata, providerUnavailable } from '../responses.js'
import { insertChargeStatement } from '../sql.js'
import { chargeSucceededEvent } from '../events.js'
import { logKey } from '../../index.js'
import { CHARGES_ROUTE } from '../operations.js'

/**
 * oncely's design, on the public API only: the adapter claims the key in its own committed
 * statement; the provider call is a phase with a key derived from the claim; the charge row
 * commits with the stored response.
 */
export function atomicPhasesRoute(deps: ServiceDeps): Array<MiddlewareHandler<ServiceEnv> | Handler<ServiceEnv>> {
  const middleware = idempotency<Queryable>({
    engine: deps.engine,
    // The auth middleware already refused anyone else; the user is read the same way here.
    scope: (c) => userFromAuthorization(requestHeader(c, 'authorization')),
    onOutcome: (event) => deps.metrics.onOutcome(event),
    log: deps.log,
  }) as unknown as MiddlewareHandler<ServiceEnv>

  const handler: Handler<ServiceEnv> = async (c) => {
    const guarded = c.get('idempotency')
    if (!guarded) throw new Error('the charges route ran without its idempotency guard')
    const { execution } = guarded
    const userId = c.get('userId')
    const input = c.get('charge')
    const crashPoint = c.get('crashPoint')
    deps.chaos.crashAt('after-claim', crashPoint)
    let result: ProviderResult
    try {
      result = await execution.step('charge', async ({ providerKey }) => {
        const answer = await deps.provider.createCharge({ ...input, metadata: providerMetadata(userId, execution.key, execution.claimId) }, providerKey)
        // Between the provider's answer and the phase's commit: the worst moment to die.
        deps.chaos.crashAt('after-provider', crashPoint)
        return answer
        // The provider dedupes by the step's key, so its result need not commit on its own: the
        // completion follows and ends the claim (issue 21), and a take-over before it runs the
        // call again and gets the same charge back.
      }, { commit: 'with-next-write' })
    } catch (error) {
      // Answered 5xx after a step began: the adapter suspends the claim, and the retry calls the
      // provider again with the same key, so it charges at most once.
      if (error instanceof ProviderUnavailableError) return providerUnavailable(error.status, error.message, 'suspended')
      throw error
    }
    if (result.outcome === 'declined') return declined(result)
    const charge = chargeFrom(input, result)
    // At most once, at no cost of its own (issue 21): sent once the completion below has
    // committed, which is its record. A crash before that commit sends nothing, and the retry
    // that completes the key sends it; a crash after it loses it; nothing sends it twice. A
    // failed send is not the charge's failure.
    execution.afterCompletion(
      'receipt',
      async () => {
        await deps.sendReceipt({ customer: input.customer, charge })
        // Sent: a crash now must not send it again (a retry replays the stored 201).
        deps.chaos.crashAt('after-receipt', crashPoint)
      },
      { onError: (error) => deps.log.warn({ route: CHARGES_ROUTE, scope: userId, key: logKey(execution.key) }, `receipt for charge ${charge.id} not sent: ${(error as Error).message}`) },
    )
    // Invariant 8: the event commits with the charge row and the completion, or not at all. Both
    // given as statements, so on the pipelining pool BEGIN, the completion, the charge row, the
    // event and COMMIT leave in one round trip (issue 11).
    guarded.writeOnCompletion(insertChargeStatement(userId, execution.key, charge))
    guarded.writeOnCompletion((await deps.outbox.prepareEnqueue(chargeSucceededEvent(charge))).statement)
    return c.json(charge, 201)
  }
  // Runs around the guard: once it returns, the completion transaction has committed. Only with
  // chaos on: otherwise it is one more async layer for every request to pass through (issue 21).
  const crashAfterComplete: MiddlewareHandler<ServiceEnv> = async (c, next) => {
    await next()
    if (c.get('idempotency')?.execution.state === 'completed') deps.chaos.crashAt('after-complete', c.get('crashPoint'))
  }
  return deps.chaos.enabled ? [crashAfterComplete, middleware, handler] : [middleware, handler]
}
