import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { serve } from '@hono/node-server'
import pg from 'pg'
import { collectDefaultMetrics } from 'prom-client'
import { createEngine, resolveLogger, type LogOption } from '../index.js'
import { createPostgresStore, migrate, withTransaction, type Queryable } from '../store/postgres/index.js'
import { createServiceApp } from './app.js'
import { storeWithCache } from './cache.js'
import { createChaos } from './chaos.js'
import { tuneCollector } from './collector.js'
import type { ServiceConfig } from './config.js'
import { openDatabase, SERVICE_POOL_SETTINGS } from './database.js'
import { claimFolder } from './folder-owner.js'
import { createStopList } from './shutdown.js'
import { checkSchemaAtStart } from './schema-check.js'
import { createProviderClient } from './provider-client.js'
import { createProviderHttp } from './provider-http.js'
import { startProviderProcess } from './provider-process.js'
import { createServiceTables } from './sql.js'
import { createOutbox } from '../outbox/index.js'
import { startEventRelay } from './events.js'
import { createReceiptSender } from './receipt.js'
import { redactUrl } from '../client/index.js'
import { createServiceMetrics, mountServiceConsole, startServiceConsole, startServiceReconciler } from './operations.js'

export interface RunningService {
  /** `http://HOST:PORT` of the API. */
  readonly url: string
  readonly providerUrl: string
  /** `http://127.0.0.1:PORT/console` of the console's own listener, or undefined when `CONSOLE_PORT` is off. */
  readonly consoleUrl: string | undefined
  /** Stops the API, then the provider (if a child), then the database (if embedded), within 7.5 s. */
  stop(): Promise<void>
  /** SIGKILLs, synchronously, the provider and the database this service runs, if still running: before an exit that cannot wait. */
  kill(): void
}

/**
 * Starts the reference service: database (embedded when no URL), migrations, provider (a child
 * when no URL), then the API. Prints the ready line when it accepts requests. `logOption` is a
 * pino-style logger (`info/warn/error(fields, message)`; lines about a request carry `route`,
 * `scope`, `key` hashed, `code` and `instance` as fields) or a line function.
 */
export async function startService(config: Readonly<ServiceConfig>, logOption: LogOption = (line) => process.stderr.write(`${line}\n`)): Promise<RunningService> {
  const logger = resolveLogger(logOption)
  // The parts that write plain lines (the database, the provider, the cache, the relay).
  const log = (line: string) => logger.info({}, line)
  const warn = (line: string) => logger.warn({}, line)
  const { push, stopAll, kill } = createStopList(warn)
  try {
    // What this service starts it owns, and adopts only what no live service owns: the folder's
    // claim comes before anything is opened, so a second start touches nothing.
    const owns = config.databaseUrl === undefined || config.providerUrl === undefined
    const claim = owns ? await claimFolder(path.dirname(path.resolve(config.dataDir))) : undefined
    if (claim) push({ name: 'the folder claim', stop: () => claim.release() })
    const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, log })
    push({ name: 'the database', stop: () => database.stop(), kill: () => database.kill(), adopted: database.adopted, database: true })
    if (config.migrate) {
      // Migrations wait for each other's advisory lock and may build indexes: not under the
      // request pool's timeouts.
      const migrations = new pg.Pool({ connectionString: database.url, max: 1 })
      try {
        await migrate({ pool: migrations, schema: config.schema })
        await withTransaction(migrations, createServiceTables)
      } finally {
        await migrations.end()
      }
    }
    const pool = new pg.Pool({ connectionString: database.url, ...SERVICE_POOL_SETTINGS })
    // An idle connection the server drops must not take the process down.
    pool.on('error', (error) => warn(`database connection lost: ${error.message}`))
    // Nor one checked out between two statements of a transaction: pg emits the socket's error on
    // the client, and a client out of the pool has no listener of the pool's.
    pool.on('connect', (client) => client.on('error', () => {}))
    push({ name: 'the pool', stop: () => pool.end() })
    await checkSchemaAtStart(pool, { schema: config.schema, migrated: config.migrate })
    const provider = config.providerUrl
      ? { url: config.providerUrl, description: 'provider', adopted: false, pid: undefined, stop: async () => {}, kill: () => {} }
      : await startProviderProcess({ host: '127.0.0.1', port: config.providerPort, latencyMs: config.providerLatencyMs, leftover: claim?.previous?.provider, log })
    push({ name: 'the provider', stop: () => provider.stop(), kill: () => provider.kill(), adopted: provider.adopted })
    const record = {
      pid: process.pid,
      ...(config.databaseUrl === undefined ? { databaseUrl: database.url } : {}),
      ...(provider.pid === undefined ? {} : { provider: { pid: provider.pid, url: provider.url } }),
    }
    await claim?.publish(record)

    const cached = await storeWithCache(config, createPostgresStore({ pool, schema: config.schema }), warn)
    push({ name: 'the cache', stop: () => cached.close() })
    const store = cached.store
    const engine = createEngine<Queryable>({ store, ttlMs: config.ttlMs, staleAfterMs: config.staleAfterMs, ...(config.encryption === undefined ? {} : { encryption: config.encryption }) })
    const metrics = createServiceMetrics({ pool, store, config, log: logger })
    collectDefaultMetrics({ register: metrics.registry })
    const providerHttp = createProviderHttp(provider.url)
    const providerClient = createProviderClient(providerHttp, { timeoutMs: 30_000 + config.providerLatencyMs })
    push({ name: 'the provider client', stop: async () => providerClient.close() })
    const app = createServiceApp({
      pool,
      engine,
      provider: providerClient,
      chaos: createChaos(config.chaos),
      metrics,
      strategy: config.strategy,
      outbox: createOutbox({ schema: config.schema, notify: config.outboxNotify }),
      sendReceipt: createReceiptSender(providerHttp, { timeoutMs: 10_000 }),
      log: logger,
    })
    if (config.relay) {
      const events = await startEventRelay({ pool, config, log })
      push({ name: 'the relay', stop: () => events.stop() })
    }
    const operations = startServiceReconciler({ engine, pool, config, providerUrl: provider.url, metrics, log: logger })
    push({ name: 'the reconciler', stop: async () => operations.reconciler?.stop() })
    const consoleOptions = { pool, config, metrics, reconcile: operations.runOnce, log: logger, cache: cached.cache }
    mountServiceConsole(app, consoleOptions)
    const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
      const started = serve({ fetch: app.fetch, port: config.port, hostname: config.host }, () => resolve(started))
      started.once('error', reject)
    })
    answerHalfClosedClients(server)
    push({
      name: 'the API',
      stop: () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve())
          // Keep-alive connections would hold close() open; requests in flight have had their chance.
          if ('closeIdleConnections' in server) server.closeIdleConnections()
          setTimeout(() => {
            if ('closeAllConnections' in server) server.closeAllConnections()
          }, 1000).unref()
        }),
    })
    const { port } = server.address() as AddressInfo
    const host = config.host.includes(':') ? `[${config.host}]` : config.host
    const url = `http://${host}:${port}`
    const served = await startServiceConsole(consoleOptions)
    if (served) push({ name: 'the console listener', stop: () => served.close() })
    await claim?.publish({ ...record, url })
    // One write, so a reader that sees the ready line sees the lines to try with it.
    process.stdout.write(
      [
        `oncely reference service (${config.strategy}, pid ${process.pid}) on ${database.description}, ${provider.description} at ${shownUrl(provider.url)}`,
        ...(config.databaseUrl === undefined ? [`database: ${database.url} (oncely commands run in this folder use it when DATABASE_URL is unset)`] : []),
        `listening on ${url}`,
        consoleLine(config, url, served?.url),
        tryLines(url),
        '',
      ].join('\n'),
    )
    return { url, providerUrl: provider.url, consoleUrl: served?.url, stop: () => stopAll(), kill }
  } catch (error) {
    await stopAll({ failedStart: true })
    throw error
  }
}

/**
 * A client that sends its whole request and then shuts its side of the socket down (a half-close)
 * gets its answer on the side still open. By default Node's HTTP server aborts every request still
 * being handled when the client's side ends and closes the socket unanswered, so a handler that
 * awaits anything (all of the service's do) never answers; a charge could run and its answer be
 * lost. `httpAllowHalfOpen` is the server's own switch for it (a property of `http.Server` that
 * `@types/node` leaves out): with it on, the response is written and the socket ended after it. A
 * request cut short by the half-close is still refused by Node's parser with 400.
 */
function answerHalfClosedClients(server: ReturnType<typeof serve>): void {
  if ('httpAllowHalfOpen' in server) (server as { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true
}

/** A URL for the banner: as given, unless it carries credentials or query values, which stdout must not show. */
function shownUrl(url: string): string {
  const parsed = URL.canParse(url) ? new URL(url) : undefined
  return parsed === undefined || parsed.username || parsed.password || parsed.search ? redactUrl(url) : url
}

/** Where the console is: its own loopback listener, and the API's `/console` with a token. */
function consoleLine(config: Readonly<ServiceConfig>, url: string, listener: string | undefined): string {
  const onApi = config.consoleToken === undefined ? undefined : `${url}/console (CONSOLE_TOKEN required)`
  if (listener === undefined) return `console: ${onApi ?? 'off (CONSOLE_PORT=off, no CONSOLE_TOKEN)'}`
  return `console: ${listener} (127.0.0.1 only${config.consoleToken === undefined ? ', no token' : ', CONSOLE_TOKEN required'})${onApi === undefined ? '' : `; ${onApi}`}`
}

function tryLines(url: string): string {
  const post = `curl -i -X POST ${url}/v1/charges -H 'Authorization: Bearer demo_1' -H 'Idempotency-Key: order-1' -H 'Content-Type: application/json' -d '{"amount":1000,"currency":"usd","customer":"cus_1"}'`
  return [
    'try:',
    `  ${post}`,
    '  # the same again: the stored answer, with Idempotent-Replayed: true; another body with the key: 422',
    `  curl -s ${url}/v1/charges/<id from above> -H 'Authorization: Bearer demo_1'`,
    `  curl -s ${url}/metrics | grep oncely_`,
    'Ctrl-C stops everything.',
  ].join('\n')
}

/** The signals that stop the service: Ctrl-C, `kill`, docker/systemd, and a closed terminal. */
const STOP_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP']
/**
 * The contract gives a stop 10 s. The stop itself is bounded (7.5 s: the parts before the database
 * 3 s, the database 4.5 s); past this the process SIGKILLs what it runs and exits regardless.
 */
const STOP_DEADLINE_MS = 9000

/**
 * Runs the service until SIGINT, SIGTERM or SIGHUP, then stops it in order. Resolves to the exit
 * code: 0 after a clean stop, 1 when it could not start. A signal repeated while stopping (a
 * Ctrl-C reaches both npm, which forwards it, and this process) changes nothing: the stop is
 * bounded by its own deadline.
 */
export async function runUntilSignal(config: Readonly<ServiceConfig>): Promise<number> {
  tuneCollector(config)
  const log = (line: string) => process.stderr.write(`${line}\n`)
  let signalled: NodeJS.Signals | undefined
  let onSignal: (signal: NodeJS.Signals) => void = (signal) => (signalled ??= signal)
  const listener = (signal: NodeJS.Signals) => onSignal(signal)
  for (const name of STOP_SIGNALS) process.on(name, listener)
  let service: RunningService
  try {
    service = await startService(config, log)
  } catch (error) {
    for (const name of STOP_SIGNALS) process.off(name, listener)
    log(`oncely serve: could not start: ${error instanceof Error ? error.message : String(error)}`)
    return 1
  }
  const stopping = signalled ?? (await new Promise<NodeJS.Signals>((resolve) => (onSignal = resolve)))
  onSignal = (signal) => log(`${signal}: already stopping`)
  log(`${stopping}: stopping`)
  const deadline = setTimeout(() => {
    log(`not stopped within ${STOP_DEADLINE_MS} ms: killing the provider and the database, and exiting`)
    service.kill()
    process.exit(1)
  }, STOP_DEADLINE_MS)
  deadline.unref()
  await service.stop()
  clearTimeout(deadline)
  log('stopped')
  // Anything still holding the event loop open (a stray socket) must not keep a stopped service alive.
  setTimeout(() => process.exit(0), 500).unref()
  return 0
}
