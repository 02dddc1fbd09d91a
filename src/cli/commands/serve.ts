import { parseArgs } from 'node:util'
import { ConfigError, ENV, resolveServiceConfig, type ServiceConfig } from '../../reference-service/config.js'
import { runUntilSignal } from '../../reference-service/service.js'
import { EXIT, UsageError, type Command } from '../command.js'

const help = `usage: oncely serve [flags]

Runs the reference payments API (docs/reference-service.md): POST /v1/charges,
GET /v1/charges/:id, /healthz, /metrics. With no DATABASE_URL it starts an
embedded PostgreSQL under .oncely/pg; with no PROVIDER_URL it starts the fake
provider as a child process. Migrates at start, prints a line containing
"listening on http://HOST:PORT" when ready, stops cleanly on SIGINT/SIGTERM.

flags (each overrides the environment variable named after it):
  --host HOST                 HOST                        (default: 127.0.0.1)
  --port N                    PORT, 0 for a free port     (default: 3000)
  --database-url URL          DATABASE_URL                (default: embedded)
  --data-dir DIR              ONCELY_DATA_DIR, embedded data (default: .oncely/pg)
  --schema NAME               ONCELY_SCHEMA               (default: oncely)
  --provider-url URL          PROVIDER_URL                (default: a child)
  --provider-port N           PROVIDER_PORT of the child  (default: 3001)
  --provider-latency-ms N     PROVIDER_LATENCY_MS         (default: 0)
  --stale-after-ms N          IDEMPOTENCY_STALE_AFTER_MS  (default: 90000)
  --ttl-ms N                  IDEMPOTENCY_TTL_MS          (default: 86400000)
  --reconcile-after-ms N      RECONCILE_AFTER_MS: a claim not renewed for this
                              long is settled by the in-process reconciler,
                              every N/2 ms; 0 turns it off; at least the stale
                              threshold                   (default: 2 × stale)
  --strategy NAME             IDEMPOTENCY_STRATEGY: atomic-phases (default),
                              select-for-update or claim-in-transaction (the
                              article's broken designs, never for production),
                              none (no idempotency: the benchmarks' baseline)
  --redis-url URL             REDIS_URL: a Redis as a cache in front of PostgreSQL
                              (entries signed with ONCELY_CACHE_SECRET)
  --console-port N            CONSOLE_PORT: the console's own listener, on
                              127.0.0.1 only; 0 for a free port, off for none
                              (default: 3002 with port 3000, else 0). The API
                              serves /console only with CONSOLE_TOKEN set
  --chaos                     CHAOS=1: honour X-Chaos-Crash: after-claim|after-provider
  --no-migrate                do not apply the migrations at start

exit codes:
  0  stopped by SIGINT or SIGTERM after a clean shutdown
  1  could not start (database, port, provider)
  2  bad usage or a bad setting
`

const FLAGS: Record<string, keyof typeof ENV> = {
  host: 'host',
  port: 'port',
  'database-url': 'databaseUrl',
  'data-dir': 'dataDir',
  schema: 'schema',
  'provider-url': 'providerUrl',
  'provider-port': 'providerPort',
  'provider-latency-ms': 'providerLatencyMs',
  'stale-after-ms': 'staleAfterMs',
  'ttl-ms': 'ttlMs',
  'reconcile-after-ms': 'reconcileAfterMs',
  strategy: 'strategy',
  'redis-url': 'redisUrl',
  'console-port': 'consolePort',
}

export const command: Command = {
  name: 'serve',
  summary: 'run the reference payments API',
  help,
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      options: {
        ...Object.fromEntries(Object.keys(FLAGS).map((flag) => [flag, { type: 'string' as const }])),
        chaos: { type: 'boolean' },
        'no-migrate': { type: 'boolean' },
      },
      strict: true,
      allowPositionals: true,
    })
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`)
    // Flags mirror the environment: each one is applied as its variable, then resolved together.
    const env: Record<string, string | undefined> = { ...process.env }
    for (const [flag, setting] of Object.entries(FLAGS)) {
      const value = (values as Record<string, string | boolean | undefined>)[flag]
      if (typeof value === 'string') env[ENV[setting]] = value
    }
    if (values.chaos === true) env[ENV.chaos] = '1'
    let config: Readonly<ServiceConfig>
    try {
      config = resolveServiceConfig(env, values['no-migrate'] === true ? { migrate: false } : {})
    } catch (error) {
      if (error instanceof ConfigError) throw new UsageError(error.message)
      throw error
    }
    const code = await runUntilSignal(config)
    return code === 0 ? EXIT.ok : EXIT.failure
  },
}
