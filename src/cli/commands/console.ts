import { parseArgs } from 'node:util'
import { createEngine, DEFAULT_TTL_MS } from '../../index.js'
import { isLoopbackHost } from '../../ops/console/console-access.js'
import { serveConsole } from '../../ops/console/serve-console.js'
import { reconcileStuckClaims } from '../../ops/reconciler.js'
import { createPostgresStore, type Queryable } from '../../store/postgres/index.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase } from '../database.js'
import { OPS_HELP, staleAfterFrom } from '../ops-output.js'
import { reconcileHookFrom } from '../reconcile-hook-loader.js'

export const command: Command = {
  name: 'console',
  summary: "the operators' web console against DATABASE_URL",
  help: `usage: oncely console [--port N] [--host H] [--hook MODULE] [--provider-url URL]

Serves the operators' console (running and stuck claims, search, a key's details, release and
reconcile buttons) against any oncely database, at http://HOST:PORT/console. It shows every
user's stored responses: it binds 127.0.0.1 by default, and every change is a POST with the
page's CSRF token from its own origin. Without CONSOLE_TOKEN it binds only a loopback address
and answers only a request whose socket is loopback at both ends and that carries no proxy
header (never put a proxy in front of it); with CONSOLE_TOKEN every request needs
Authorization: Bearer <token> or the login form, on any host. Forcing the release of a key
with a stored outcome needs CONSOLE_TOKEN and the key typed again. Live request rates are
shown by the service's own console, which sees the requests.

  --port N             port (default 4000; 0 picks a free one)
  --host H             interface (default 127.0.0.1)
  --hook MODULE        the reconcile button's hook (see oncely reconcile --help); default: the
                       reference service's, looking charges up at --provider-url
  --provider-url URL   (default: $PROVIDER_URL, else http://127.0.0.1:3001)
${OPS_HELP.split('\n')[0]}
${DATABASE_HELP}

environment: CONSOLE_TOKEN (at least 16 characters)
exit codes: 0 stopped by SIGINT/SIGTERM, 1 could not start, 2 bad usage or no database`,
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      options: { ...DATABASE_FLAGS, 'stale-after-ms': { type: 'string' }, port: { type: 'string' }, host: { type: 'string' }, hook: { type: 'string' }, 'provider-url': { type: 'string' } },
      strict: true,
    })
    const staleAfterMs = staleAfterFrom(values)
    const port = values.port === undefined ? 4000 : Number(values.port)
    if (!Number.isSafeInteger(port) || port < 0 || port > 65535) throw new UsageError(`--port must be 0 to 65535, got ${JSON.stringify(values.port)}`)
    const host = values.host ?? '127.0.0.1'
    const token = process.env.CONSOLE_TOKEN?.trim() || undefined
    if (token === undefined && !isLoopbackHost(host)) throw new UsageError(`--host ${host} is not loopback: set CONSOLE_TOKEN (the console shows every user's stored responses)`)
    const { pool, schema } = openDatabase(values)
    const log = (line: string) => process.stderr.write(`${line}\n`)
    try {
      const hook = await reconcileHookFrom(values, pool, schema)
      const engine = createEngine<Queryable>({ store: createPostgresStore({ pool, schema }), staleAfterMs, ttlMs: DEFAULT_TTL_MS })
      const served = await serveConsole({
        database: { pool, schema },
        staleAfterMs,
        token,
        reconcile: () => reconcileStuckClaims({ engine, database: { pool, schema }, hook, log }),
        log,
        host,
        port,
      })
      process.stdout.write(`oncely console on schema "${schema}": listening on ${served.url}\n`)
      const signal = await new Promise<NodeJS.Signals>((resolve) => {
        process.once('SIGINT', () => resolve('SIGINT'))
        process.once('SIGTERM', () => resolve('SIGTERM'))
      })
      log(`${signal}: stopping`)
      await served.close()
      return EXIT.ok
    } catch (error) {
      if (error instanceof UsageError) throw error
      process.stderr.write(`oncely console: could not start: ${(error as Error).message}\n`)
      return EXIT.failure
    } finally {
      await pool.end()
    }
  },
}
