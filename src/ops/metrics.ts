import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import { DEFAULT_STALE_AFTER_MS, positiveInteger } from '../engine/options.js'

/** The outcomes a guarded request can come to; the adapters report one per request. */
export const REQUEST_OUTCOMES = ['created', 'replayed', 'conflict', 'mismatch', 'invalid', 'failed', 'unkeyed'] as const
export type RequestOutcome = (typeof REQUEST_OUTCOMES)[number]

/** One guarded request, as the adapters' `onOutcome` reports it. */
export interface RequestOutcomeEvent {
  outcome: RequestOutcome
  durationMs: number
  status: number
}

/** What the stuck-keys gauge needs from a store: `createPostgresStore` has it. */
export interface StaleClaimCounter {
  countStaleClaims(staleAfterMs: number): Promise<number>
}

export interface MetricsOptions {
  /** The registry to register on; pass prom-client's `register` to share the global one. (Default: a new `Registry`) */
  registry?: Registry
  /** Store to count stale claims in at each scrape; without it the gauge is left out. (Default: none) */
  store?: StaleClaimCounter
  /** The engine's stale threshold: claims `in_progress` longer than this are counted as stuck. (Default: 90000) */
  staleAfterMs?: number
  /** Prefix of every metric name. (Default: `oncely_`) */
  prefix?: string
}

export interface OncelyMetrics {
  readonly registry: Registry
  /** Records one request; pass it as an adapter's `onOutcome`. */
  onOutcome(this: void, event: RequestOutcomeEvent): void
}

/**
 * The metrics DESIGN.md asks to watch: requests by outcome (the replay and 409 rates), handler
 * duration (the stale threshold must sit above its p99), and keys `in_progress` past the stale
 * threshold (the operations stuck now), counted in the database at each scrape.
 *
 * @example
 * ```ts
 * import { createMetrics } from 'oncely'
 * import { idempotency } from 'oncely/hono'
 * const metrics = createMetrics({ store, staleAfterMs: 30_000 })
 * app.use('/v1/*', idempotency({ engine, scope, onOutcome: metrics.onOutcome }))
 * app.get('/metrics', async (c) => c.text(await metrics.registry.metrics()))
 * ```
 */
export function createMetrics(options: MetricsOptions = {}): OncelyMetrics {
  const registry = options.registry ?? new Registry()
  const prefix = options.prefix ?? 'oncely_'
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const requests = new Counter({
    name: `${prefix}requests_total`,
    help: 'Requests on guarded routes, by outcome: created, replayed, conflict, mismatch, invalid, failed, unkeyed (no key, required: false).',
    labelNames: ['outcome'],
    registers: [registry],
  })
  // Every outcome is present from the first scrape, so rates never start from a missing series.
  for (const outcome of REQUEST_OUTCOMES) requests.labels(outcome).inc(0)
  const duration = new Histogram({
    name: `${prefix}request_duration_seconds`,
    help: 'Time from the idempotency guard to the answer, handler included, by outcome. Keep the stale threshold above the p99 of created.',
    labelNames: ['outcome'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [registry],
  })
  const store = options.store
  if (store) {
    new Gauge({
      name: `${prefix}stale_in_progress_keys`,
      help: `Keys in_progress for longer than the stale threshold (${staleAfterMs} ms): operations stuck now.`,
      registers: [registry],
      async collect() {
        try {
          this.set(await store.countStaleClaims(staleAfterMs))
        } catch {
          // The database is away: keep the last value; /healthz reports the outage.
        }
      },
    })
  }
  return Object.freeze({
    registry,
    onOutcome(event: RequestOutcomeEvent) {
      requests.labels(event.outcome).inc()
      duration.labels(event.outcome).observe(event.durationMs / 1000)
    },
  })
}
