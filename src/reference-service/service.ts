import type { AddressInfo } from 'node:net'
import { serve } from '@hono/node-server'
import pg from 'pg'
import { collectDefaultMetrics } from 'prom-client'
import { createEngine } from '../index.js'
import { createPostgresStore, migrate, withTransaction, type Queryable } from '../store/postgres/index.js'
import { createServiceApp } from './app.js'
import { createChaos } from './chaos.js'
import type { ServiceConfig } from './config.js'
import { openDatabase, SERVICE_POOL_SETTINGS } from './database.js'
import { createProviderClient } from './provider-client.js'
import { startProviderProcess } from './provider-process.js'
import { createServiceTables } from './sql.js'
import { createServiceMetrics } from './operations.js'

export interface RunningService {
  /** `http://HOST:PORT` of the API. */
  readonly url: string
  readonly providerUrl: string
  /** Stops the API, then the provider (if a child), then the database (if embedded). */
  stop(): Promise<void>
}

/**
 * Starts the reference service: database (embedded when no URL), migrations, provider (a child
 * when no URL), then the API. Prints the ready line when it accepts requests.
 */
export async function startService(config: Readonly<ServiceConfig>, log: (line: string) => void = (line) => process.stderr.write(`${line}\n`)): Promise<RunningService> {
  const cleanups: Array<() => Promise<void>> = []
  const stopAll = async () => {
    for (const cleanup of cleanups.splice(0).reverse()) {
      try {
        await cleanup()
      } catch (error) {
        log(`while stopping: ${String(error)}`)
      }
    }
  }
  try {
    const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, log })
    cleanups.push(() => database.stop())
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
    pool.on('error', (error) => log(`database connection lost: ${error.message}`))
    // Nor one checked out between two statements of a transaction: pg emits the socket's error on
    // the client, and a client out of the pool has no listener of the pool's.
    pool.on('connect', (client) => client.on('error', () => {}))
    cleanups.push(() => pool.end())
    const provider = config.providerUrl
      ? { url: config.providerUrl, description: `provider at ${config.providerUrl}`, stop: async () => {} }
      : await startProviderProcess({ host: '127.0.0.1', port: config.providerPort, latencyMs: config.providerLatencyMs, log })
    cleanups.push(() => provider.stop())

    const store = createPostgresStore({ pool, schema: config.schema })
    const engine = createEngine<Queryable>({ store, ttlMs: config.ttlMs, staleAfterMs: config.staleAfterMs })
    const metrics = createServiceMetrics({ pool, store, config, log })
    collectDefaultMetrics({ register: metrics.registry })
    const app = createServiceApp({
      pool,
      engine,
      provider: createProviderClient(provider.url, { timeoutMs: 30_000 + config.providerLatencyMs }),
      chaos: createChaos(config.chaos),
      metrics,
      strategy: config.strategy,
      log,
    })
    const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
      const started = serve({ fetch: app.fetch, port: config.port, hostname: config.host }, () => resolve(started))
      started.once('error', reject)
    })
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve())
          // Keep-alive connections would hold close() open; requests in flight have had their chance.
          if ('closeIdleConnections' in server) server.closeIdleConnections()
          setTimeout(() => {
            if ('closeAllConnections' in server) server.closeAllConnections()
          }, 2000).unref()
        }),
    )
    const { port } = server.address() as AddressInfo
    const host = config.host.includes(':') ? `[${config.host}]` : config.host
    const url = `http://${host}:${port}`
    // One write, so a reader that sees the ready line sees the lines to try with it.
    process.stdout.write(
      [`oncely reference service (${config.strategy}) on ${database.description}, ${provider.description} at ${provider.url}`, `listening on ${url}`, tryLines(url), ''].join('\n'),
    )
    return { url, providerUrl: provider.url, stop: stopAll }
  } catch (error) {
    await stopAll()
    throw error
  }
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

/**
 * Runs the service until SIGINT or SIGTERM, then stops it in order. Resolves to the exit code:
 * 0 after a clean stop, 1 when it could not start. A second signal exits at once.
 */
export async function runUntilSignal(config: Readonly<ServiceConfig>): Promise<number> {
  const log = (line: string) => process.stderr.write(`${line}\n`)
  let signalled: NodeJS.Signals | undefined
  const early = (signal: NodeJS.Signals) => (signalled = signal)
  process.once('SIGINT', early)
  process.once('SIGTERM', early)
  let service: RunningService
  try {
    service = await startService(config, log)
  } catch (error) {
    log(`oncely serve: could not start: ${error instanceof Error ? error.message : String(error)}`)
    return 1
  } finally {
    process.off('SIGINT', early)
    process.off('SIGTERM', early)
  }
  if (signalled === undefined) {
    signalled = await new Promise<NodeJS.Signals>((resolve) => {
      process.once('SIGINT', () => resolve('SIGINT'))
      process.once('SIGTERM', () => resolve('SIGTERM'))
    })
  }
  process.once('SIGINT', () => process.exit(130))
  process.once('SIGTERM', () => process.exit(143))
  log(`${signalled}: stopping`)
  await service.stop()
  log('stopped')
  // Anything still holding the event loop open (a stray socket) must not keep a stopped service alive.
  setTimeout(() => process.exit(0), 2000).unref()
  return 0
}
