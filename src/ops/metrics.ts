import { createRequire } from 'node:module'
import type { Registry } from 'prom-client'
import { OncelyError } from '../errors.js'
import { DEFAULT_STALE_AFTER_MS } from '../engine/options.js'
import { invalid, positiveInteger } from '../option-validation.js'
import type { AdminDatabase } from './admin-database.js'
import { countRunningClaims, type RunningClaims } from './key-stats.js'
import { logKey, resolveLogger, type LogOption } from '../logger.js'
import { createRepeatedPayloadDetector, type RepeatedPayloadOptions } from './repeated-payloads.js'
import { createStaleThresholdAdvice } from './stale-threshold-advice.js'

import { RECONCILE_DECISIONS, REQUEST_OUTCOMES, type ReconcileDecisionName, type RequestOutcome } from './reconcile-decisions.js'

export { RECONCILE_DECISIONS, REQUEST_OUTCOMES }
export type { ReconcileDecisionName, RequestOutcome }

/** One guarded request, as the adapters' `onOutcome` reports it. */
export interface RequestOutcomeEvent {
  outcome: RequestOutcome
  durationMs: number
  status: number
  /** `METHOD /route/pattern`, for the per-route counter and the repeated-payload line. (Default: none) */
  route?: string
  /** With `key` and `fingerprint`: feeds the repeated-payload detector. (Default: none) */
  scope?: string
  key?: string
  fingerprint?: string
}

/** What the stuck-keys gauge needs from a store: `createPostgresStore` has it. */
export interface StaleClaimCounter {
  countStaleClaims(staleAfterMs: number): Promise<number>
}

/** Where the outbox gauges read from: the outbox's own backlog query. */
export interface OutboxBacklogSource {
  backlog(): Promise<{ waiting: number; oldestAgeMs: number }>
}

export interface MetricsOptions {
  /** The registry to register on; pass prom-client's `register` to share the global one. (Default: a new `Registry`) */
  registry?: Registry
  /** Store to count stale claims in at each scrape; without it (and without `database`) the gauge is left out. (Default: none) */
  store?: StaleClaimCounter
  /** Pool and schema to count running claims in at each scrape, by lease age and by age since creation. (Default: none) */
  database?: AdminDatabase
  /** The outbox whose backlog to report at each scrape. (Default: none) */
  outbox?: OutboxBacklogSource
  /** The engine's stale threshold: claims `in_progress` longer than this are counted as stuck. (Default: 90000) */
  staleAfterMs?: number
  /** Prefix of every metric name. (Default: `oncely_`) */
  prefix?: string
  /** Routes (`METHOD /pattern`) whose per-route series exist from the first scrape. (Default: `[]`) */
  routes?: readonly string[]
  /** The repeated-payload detector's window and memory; `false` turns it off. (Default: `{ windowMs: 60000, maxEntries: 10000 }`) */
  repeatedPayloads?: RepeatedPayloadOptions | false
  /** At most one repeated-payload log line per route per this many ms. (Default: 60000) */
  repeatedPayloadLogEveryMs?: number
  /** Where the warnings go: a pino-style logger or a line function. (Default: `console.warn`) */
  log?: LogOption
}

export interface OncelyMetrics {
  readonly registry: Registry
  /** Records one request; pass it as an adapter's `onOutcome`. */
  onOutcome(this: void, event: RequestOutcomeEvent): void
  /** Records a request's payload for the repeated-payload detector, where `onOutcome` cannot carry it. */
  observePayload(this: void, request: { scope: string; key: string; fingerprint: string; route?: string }): void
  /** Records one reconciler decision; pass it as the reconciler's `onDecision`. */
  onReconcile(this: void, decision: { decision: ReconcileDecisionName }): void
  /** Requests so far by outcome, for the console's live rates. */
  outcomeTotals(this: void): Promise<Record<string, number>>
}

/**
 * The metrics DESIGN.md asks to watch (docs/operations.md gives each one's alert): requests by
 * outcome and route (the replay and 409 rates), the claim-to-answer histogram (the stale
 * threshold must sit above its p99, and a gauge says when it does not), running claims by lease
 * age and by age since creation (the operations stuck now, and hung handlers), the reconciler's
 * decisions, the outbox backlog, and payloads repeated under a new key. Loaded from
 * `oncely/metrics`, so `import 'oncely'` never loads prom-client.
 *
 * @example
 * ```ts
 * import { createMetrics } from 'oncely/metrics'
 * import { idempotency } from 'oncely/hono'
 * const metrics = createMetrics({ database: { pool }, staleAfterMs: 30_000 })
 * app.use('/v1/*', idempotency({ engine, scope, onOutcome: metrics.onOutcome }))
 * app.get('/metrics', async (c) => c.text(await metrics.registry.metrics()))
 * ```
 */
export function createMetrics(options: MetricsOptions = {}): OncelyMetrics {
  const { Counter, Gauge, Histogram, Registry } = loadPromClient()
  const registry = options.registry ?? new Registry()
  const prefix = options.prefix ?? 'oncely_'
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const log = resolveLogger(options.log)
  const logEveryMs = positiveInteger('repeatedPayloadLogEveryMs', options.repeatedPayloadLogEveryMs ?? 60_000)
  const detector = options.repeatedPayloads === false ? undefined : repeatedPayloadDetector(options.repeatedPayloads ?? {})
  const common = { registers: [registry] }

  const requests = new Counter({ ...common, name: `${prefix}requests_total`, help: 'Requests on guarded routes, by outcome: created, replayed, conflict, mismatch, invalid, failed, unkeyed (no key, required: false).', labelNames: ['outcome'] })
  const byRoute = new Counter({ ...common, name: `${prefix}route_requests_total`, help: 'Requests on guarded routes, by route and outcome.', labelNames: ['route', 'outcome'] })
  // Every outcome is present from the first scrape, so rates never start from a missing series.
  for (const outcome of REQUEST_OUTCOMES) {
    requests.labels(outcome).inc(0)
    for (const route of options.routes ?? []) byRoute.labels(route, outcome).inc(0)
  }
  const duration = new Histogram({
    ...common,
    name: `${prefix}request_duration_seconds`,
    help: 'Time from the idempotency guard (the claim) to the answer, handler included, by outcome. Keep the stale threshold above the p99 of created.',
    labelNames: ['outcome'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
  })
  const repeated = new Counter({ ...common, name: `${prefix}repeated_payload_new_key_total`, help: 'Requests whose payload the same user sent under another Idempotency-Key within the window: a client minting a key per attempt.', labelNames: ['route'] })
  for (const route of options.routes ?? []) repeated.labels(route).inc(0)
  const reconciled = new Counter({ ...common, name: `${prefix}reconciled_total`, help: 'Claims the reconciler handled, by decision: completed, failed, unresolved (left suspended), expired (settled failed past the TTL), skipped (someone else acted first), error.', labelNames: ['decision'] })
  for (const decision of RECONCILE_DECISIONS) reconciled.labels(decision).inc(0)

  const advice = createStaleThresholdAdvice({
    staleAfterMs,
    onTooClose: (p99Ms) =>
      log.warn({ p99Ms: Math.round(p99Ms), staleAfterMs }, 'the p99 of created requests reached half the stale threshold: raise staleAfterMs, or a slow live handler may soon look stale'),
  })
  new Gauge({ ...common, name: `${prefix}created_duration_p99_seconds`, help: 'p99 of the last 1000 created requests, guard to answer.', collect() { this.set(advice.p99() / 1000) } })
  new Gauge({ ...common, name: `${prefix}stale_threshold_too_close`, help: `1 while the p99 of created requests is at least half the stale threshold (${staleAfterMs} ms): raise it.`, collect() { this.set(advice.tooClose() ? 1 : 0) } })

  registerClaimGauges(options, prefix, staleAfterMs, registry)
  registerOutboxGauges(options.outbox, prefix, registry)

  const lastLine = new Map<string, { at: number; suppressed: number }>()
  const observePayload = (request: { scope: string; key: string; fingerprint: string; route?: string }): void => {
    if (!detector || !detector.observe(request.scope, request.key, request.fingerprint)) return
    const route = request.route ?? ''
    repeated.labels(route).inc()
    const now = Date.now()
    const last = lastLine.get(route)
    if (last !== undefined && now - last.at < logEveryMs) {
      last.suppressed++
      return
    }
    lastLine.set(route, { at: now, suppressed: 0 })
    log.warn(
      { route, scope: request.scope, key: logKey(request.key), suppressedSinceLastLine: last?.suppressed ?? 0 },
      'the same payload arrived from the same user under a new Idempotency-Key: a client may be minting a key per attempt, so retries are not deduplicated',
    )
  }

  return Object.freeze({
    registry,
    onOutcome(event: RequestOutcomeEvent) {
      requests.inc({ outcome: event.outcome })
      if (event.route !== undefined) byRoute.inc({ route: event.route, outcome: event.outcome })
      duration.observe({ outcome: event.outcome }, event.durationMs / 1000)
      if (event.outcome === 'created') advice.observe(event.durationMs)
      if (event.scope !== undefined && event.key !== undefined && event.fingerprint !== undefined) {
        observePayload({ scope: event.scope, key: event.key, fingerprint: event.fingerprint, ...(event.route === undefined ? {} : { route: event.route }) })
      }
    },
    observePayload,
    onReconcile(event: { decision: ReconcileDecisionName }) {
      reconciled.labels(event.decision).inc()
    },
    async outcomeTotals() {
      const { values } = await requests.get()
      return Object.fromEntries(values.map((value) => [String(value.labels.outcome), value.value]))
    },
  })
}

function repeatedPayloadDetector(options: RepeatedPayloadOptions) {
  if (typeof options !== 'object' || options === null) throw invalid('repeatedPayloads', 'must be an object or false', options)
  return createRepeatedPayloadDetector({
    windowMs: positiveInteger('repeatedPayloads.windowMs', options.windowMs ?? 60_000),
    maxEntries: positiveInteger('repeatedPayloads.maxEntries', options.maxEntries ?? 10_000),
  })
}

/** Gauges read from the database at each scrape; one statement per scrape, shared by all. */
/**
 * prom-client, an optional peer dependency, loaded when metrics are first created rather than
 * imported: `oncely/metrics` then loads without it and says what to install. It is a CommonJS
 * package, so this is the same instance an application's own `import 'prom-client'` gets (its
 * global `register` included).
 */
function loadPromClient(): typeof import('prom-client') {
  try {
    return createRequire(import.meta.url)('prom-client') as typeof import('prom-client')
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'MODULE_NOT_FOUND') throw error
    throw new OncelyError('ONCELY_PEER_MISSING', 'createMetrics needs the prom-client package, an optional peer dependency of oncely: npm install prom-client', { cause: error })
  }
}

function registerClaimGauges(options: MetricsOptions, prefix: string, staleAfterMs: number, registry: Registry): void {
  const { Gauge } = loadPromClient()
  const { store, database } = options
  if (!store && !database) return
  const common = { registers: [registry] }
  let pending: Promise<RunningClaims | undefined> | undefined
  // Each gauge's collect() runs at every scrape; they share one query per scrape.
  const read = (): Promise<RunningClaims | undefined> => {
    pending ??= (database ? countRunningClaims(database, staleAfterMs) : Promise.resolve(undefined))
      .catch(() => undefined)
      .finally(() => setImmediate(() => (pending = undefined)))
    return pending
  }
  new Gauge({
    ...common,
    name: `${prefix}stale_in_progress_keys`,
    help: `Keys in_progress whose lease is older than the stale threshold (${staleAfterMs} ms): operations stuck now.`,
    async collect() {
      try {
        const running = await read()
        this.set(running ? running.staleByLease : await (store as StaleClaimCounter).countStaleClaims(staleAfterMs))
      } catch {
        // The database is away: keep the last value; /healthz reports the outage.
      }
    },
  })
  if (!database) return
  new Gauge({
    ...common,
    name: `${prefix}running_claims`,
    help: 'Claims in_progress, by state: held (an owner holds the fence token, live or dead) or suspended (given up, waiting for a retry or the reconciler).',
    labelNames: ['state'],
    async collect() {
      const running = await read()
      if (!running) return
      this.labels('held').set(running.held)
      this.labels('suspended').set(running.suspended)
    },
  })
  new Gauge({
    ...common,
    name: `${prefix}running_claims_past_stale`,
    help: `Claims in_progress older than the stale threshold, since their last lease (owner gone) or since their creation (a hung handler that keeps renewing shows here).`,
    labelNames: ['since'],
    async collect() {
      const running = await read()
      if (!running) return
      this.labels('lease').set(running.staleByLease)
      this.labels('creation').set(running.staleByCreation)
    },
  })
  new Gauge({
    ...common,
    name: `${prefix}running_claim_oldest_age_seconds`,
    help: 'Age of the oldest claim in_progress, since its last lease and since its creation.',
    labelNames: ['since'],
    async collect() {
      const running = await read()
      if (!running) return
      this.labels('lease').set(running.oldestLeaseAgeMs / 1000)
      this.labels('creation').set(running.oldestAgeMs / 1000)
    },
  })
}

function registerOutboxGauges(outbox: OutboxBacklogSource | undefined, prefix: string, registry: Registry): void {
  const { Gauge } = loadPromClient()
  if (!outbox) return
  let pending: Promise<{ waiting: number; oldestAgeMs: number } | undefined> | undefined
  const read = () => {
    pending ??= outbox
      .backlog()
      .catch(() => undefined)
      .finally(() => setImmediate(() => (pending = undefined)))
    return pending
  }
  new Gauge({ registers: [registry], name: `${prefix}outbox_waiting_events`, help: 'Outbox events written but not yet published.', async collect() { const b = await read(); if (b) this.set(b.waiting) } })
  new Gauge({ registers: [registry], name: `${prefix}outbox_oldest_event_age_seconds`, help: 'Age of the oldest unpublished outbox event.', async collect() { const b = await read(); if (b) this.set(b.oldestAgeMs / 1000) } })
}
