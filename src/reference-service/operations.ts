import { createOutbox, outboxBacklog } from '../outbox/index.js'
import type { Hono } from 'hono'
import { createConsole } from '../ops/console/console-handler.js'
import { createMetrics, type OncelyMetrics, type RequestOutcomeEvent } from '../ops/metrics.js'
import type { LogOption } from '../index.js'
import type { Engine } from '../engine/engine.js'
import { reconcileStuckClaims, type ReconcileReport } from '../ops/reconciler.js'
import type { EvictableCache } from '../ops/release-key.js'
import { startReconciler, type ReconcilerLoop } from '../ops/reconciler-loop.js'
import type { PoolLike, PostgresStore, Queryable } from '../store/postgres/index.js'
import { chargeReconcileHook } from './charge-reconcile-hook.js'
import type { ServiceConfig } from './config.js'
import type { ServiceEnv } from './context.js'

/** The one route the service guards, as the per-route metrics name it. */
export const CHARGES_ROUTE = 'POST /v1/charges'

/**
 * The service's metrics: every outcome is on `POST /v1/charges`, so the route is added here, and
 * the running-claims gauges read the service's own pool.
 */
export function createServiceMetrics(options: { pool: PoolLike; store: PostgresStore; config: Readonly<ServiceConfig>; log: LogOption }): OncelyMetrics {
  const { pool, store, config, log } = options
  // The outbox gauges read the relay's backlog at each scrape (events waiting, oldest age).
  const outbox = {
    async backlog() {
      const row = await outboxBacklog({ pool, schema: config.schema })
      return { waiting: Number(row.pending), oldestAgeMs: Number(row.oldest_pending_age_seconds) * 1000 }
    },
  }
  const metrics = createMetrics({ store, database: { pool, schema: config.schema }, staleAfterMs: config.staleAfterMs, routes: [CHARGES_ROUTE], outbox, log })
  return Object.freeze({ ...metrics, onOutcome: (event: RequestOutcomeEvent) => metrics.onOutcome({ route: CHARGES_ROUTE, ...event }) })
}

/** The service's in-process reconciler, or none when `RECONCILE_AFTER_MS` is 0. */
export function startServiceReconciler(options: {
  engine: Engine<Queryable>
  pool: PoolLike
  config: Readonly<ServiceConfig>
  providerUrl: string
  metrics: OncelyMetrics
  log: LogOption
}): { reconciler: ReconcilerLoop | undefined; runOnce: () => Promise<ReconcileReport[]> } {
  const { engine, pool, config, providerUrl, metrics, log } = options
  const reconcileOptions = {
    engine,
    database: { pool, schema: config.schema },
    hook: chargeReconcileHook({ pool, providerUrl, outbox: createOutbox({ schema: config.schema, notify: config.outboxNotify }) }),
    // With the in-process reconciler off, the console's button still settles claims past 2 × stale.
    olderThanMs: config.reconcileAfterMs === 0 ? 2 * config.staleAfterMs : config.reconcileAfterMs,
    onDecision: metrics.onReconcile,
    log,
  }
  if (config.reconcileAfterMs === 0) return { reconciler: undefined, runOnce: () => reconcileStuckClaims(reconcileOptions) }
  const reconciler = startReconciler({ ...reconcileOptions, intervalMs: Math.max(1, Math.floor(config.reconcileAfterMs / 2)) })
  return { reconciler, runOnce: () => reconciler.runOnce() }
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '::1'])

/**
 * `GET /console`: the operators' page. On a non-loopback `HOST` it is served only with
 * `CONSOLE_TOKEN` set; with the token set it is required on any host.
 */
export function mountServiceConsole(
  app: Hono<ServiceEnv>,
  options: { pool: PoolLike; config: Readonly<ServiceConfig>; metrics: OncelyMetrics; reconcile: () => Promise<ReconcileReport[]>; log: LogOption; cache?: EvictableCache | undefined },
): void {
  const { pool, config, metrics, reconcile, log, cache } = options
  const operatorConsole = createConsole({
    database: { pool, schema: config.schema },
    staleAfterMs: config.staleAfterMs,
    exposed: !LOOPBACK_HOSTS.has(config.host),
    ...(config.consoleToken === undefined ? {} : { token: config.consoleToken }),
    outcomeTotals: metrics.outcomeTotals,
    reconcile,
    log,
    // A key released from the page must not replay the cache's answer (issue 10).
    ...(cache === undefined ? {} : { cache }),
  })
  app.all('/console', (c) => operatorConsole.fetch(c.req.raw))
  app.all('/console/*', (c) => operatorConsole.fetch(c.req.raw))
}
