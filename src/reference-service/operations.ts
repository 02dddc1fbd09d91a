import type { MiddlewareHandler } from 'hono'
import { createMetrics, type OncelyMetrics, type RequestOutcomeEvent } from '../ops/metrics.js'
import { fingerprintRequest } from '../index.js'
import type { PostgresStore } from '../store/postgres/index.js'
import type { PoolLike } from '../store/postgres/index.js'
import type { ServiceConfig } from './config.js'
import type { ServiceEnv } from './context.js'

/** The one route the service guards, as the per-route metrics name it. */
export const CHARGES_ROUTE = 'POST /v1/charges'

/**
 * The service's metrics: every outcome is on `POST /v1/charges`, so the route is added here, and
 * the running-claims gauges read the service's own pool.
 */
export function createServiceMetrics(options: { pool: PoolLike; store: PostgresStore; config: Readonly<ServiceConfig>; log: (line: string) => void }): OncelyMetrics {
  const { pool, store, config, log } = options
  const metrics = createMetrics({ store, database: { pool, schema: config.schema }, staleAfterMs: config.staleAfterMs, routes: [CHARGES_ROUTE], log })
  return Object.freeze({ ...metrics, onOutcome: (event: RequestOutcomeEvent) => metrics.onOutcome({ route: CHARGES_ROUTE, ...event }) })
}

/**
 * Feeds the repeated-payload detector with each valid charge request: the user, the key and the
 * fingerprint of the body, before the guard answers (a replay repeats its key, so it never
 * counts). Runs after validation, so a malformed request is never counted.
 */
export function observeChargePayload(metrics: OncelyMetrics): MiddlewareHandler<ServiceEnv> {
  return async (c, next) => {
    const key = c.req.header('idempotency-key')
    if (key !== undefined) {
      metrics.observePayload({ scope: c.get('userId'), key, fingerprint: fingerprintRequest({ method: 'POST', route: '/v1/charges', body: c.get('chargeBody') }), route: CHARGES_ROUTE })
    }
    await next()
  }
}
