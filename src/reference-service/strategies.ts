import type { Handler, MiddlewareHandler } from 'hono'
import type { ServiceDeps, ServiceEnv } from './context.js'
import { atomicPhasesRoute } from './strategies/atomic-phases.js'
import { claimInTransactionRoute } from './strategies/claim-in-transaction.js'
import { noneRoute } from './strategies/none.js'
import { selectForUpdateRoute } from './strategies/select-for-update.js'

/**
 * The handlers of `POST /v1/charges` for the chosen strategy. `atomic-phases` is oncely; the
 * next two are the article's broken designs, kept to reproduce its measured table; `none` is the
 * same route with no idempotency at all, the baseline of the benchmarks.
 */
export function chargeRoute(deps: ServiceDeps): Array<MiddlewareHandler<ServiceEnv> | Handler<ServiceEnv>> {
  switch (deps.strategy) {
    case 'atomic-phases':
      return atomicPhasesRoute(deps)
    case 'select-for-update':
      return [selectForUpdateRoute(deps)]
    case 'claim-in-transaction':
      return [claimInTransactionRoute(deps)]
    case 'none':
      return [noneRoute(deps)]
  }
}
