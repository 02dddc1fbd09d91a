import { createOutbox, outboxBacklog } from '../outbox/index.js'
import type { IncomingMessage } from 'node:http'
import type { Handler, Hono } from 'hono'
import { createMetrics, type OncelyMetrics, type RequestOutcomeEvent } from '../ops/metrics.js'
import type { Engine, LogOption } from '../index.js'
import { createConsole, reconcileStuckClaims, serveConsole, startReconciler, type EvictableCache, type OperatorConsole, type ReconcilerLoop, type ReconcileReport, type ServedConsole } from '../ops/index.js'
import type { PoolLike, PostgresStore, Queryable } from '../store/postgres/index.js'
import { chargeReconcileHook } from './charge-reconcile-hook.js'
import { ENV, type ServiceConfig } from './config.js'
import type { ServiceEnv } from './context.js'
import { problem, REFUSED_BEFORE_ANY_CLAIM } from './problem.js'

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

export interface ServiceConsoleOptions {
  pool: PoolLike
  config: Readonly<ServiceConfig>
  metrics: OncelyMetrics
  reconcile: () => Promise<ReconcileReport[]>
  log: LogOption
  cache?: EvictableCache | undefined
}

function consoleOptions(options: ServiceConsoleOptions) {
  const { pool, config, metrics, reconcile, log, cache } = options
  return {
    database: { pool, schema: config.schema },
    staleAfterMs: config.staleAfterMs,
    outcomeTotals: metrics.outcomeTotals,
    reconcile,
    log,
    // A key released from the page must not replay the cache's answer (issue 10).
    ...(cache === undefined ? {} : { cache }),
  }
}

/**
 * `/console` on the API: with `CONSOLE_TOKEN`, the console, which needs the token on every
 * request whatever its host; without, a 404 that says where the console is. The API is what a
 * reverse proxy routes to, and a proxy on this host makes every client look local, so the API
 * never serves the console without a token (issue 22).
 */
export function mountServiceConsole(app: Hono<ServiceEnv>, options: ServiceConsoleOptions): void {
  const { consoleToken: token, consolePort } = options.config
  const elsewhere =
    consolePort === undefined
      ? `the console is off (${ENV.consolePort}=off); set ${ENV.consoleToken} to serve it here`
      : `the console is on its own listener on 127.0.0.1 (${ENV.consolePort}, printed at start), or set ${ENV.consoleToken} to serve it here`
  const answer: Handler<ServiceEnv> =
    token === undefined
      ? (c) => problem({ type: 'not-found', title: 'Not Found', status: 404, detail: `${c.req.path} is not served on the API without ${ENV.consoleToken}: ${elsewhere}`, ...REFUSED_BEFORE_ANY_CLAIM })
      : consoleHandler(createConsole({ ...consoleOptions(options), token }))
  app.all('/console', answer)
  app.all('/console/*', answer)
}

/** The console's own listener on 127.0.0.1 (`CONSOLE_PORT`), or none when it is off. */
export async function startServiceConsole(options: ServiceConsoleOptions): Promise<ServedConsole | undefined> {
  if (options.config.consolePort === undefined) return undefined
  return serveConsole({ ...consoleOptions(options), token: options.config.consoleToken, host: '127.0.0.1', port: options.config.consolePort })
}

/** Hands the request to the console with the socket it came on, for the audit line's actor. */
function consoleHandler(operatorConsole: OperatorConsole): Handler<ServiceEnv> {
  return (c) => {
    const socket = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket
    return operatorConsole.fetch(c.req.raw, { localAddress: socket?.localAddress, remoteAddress: socket?.remoteAddress })
  }
}
