import { parseArgs } from 'node:util'
import { ConfigError } from '../../reference-service/config.js'
import { providerSettings, runProvider } from '../../reference-service/provider-run.js'
import { EXIT, UsageError, type Command } from '../command.js'

const help = `usage: oncely provider [flags]

Runs the fake payment provider alone: POST /v1/charges honours its own
Idempotency-Key (same key, same charge) and metadata.order_id; GET /v1/charges
lists every charge ({ "data": [...] }), ?order_id=X finds one; customers
starting with cus_decline are declined (402); customers starting with cus_flaky
get 503 before any charge on the first N calls per key. Prints a line containing
"listening on http://HOST:PORT" when ready; stops on SIGINT/SIGTERM. State is
in memory.

flags (each overrides the environment variable named after it):
  --host HOST          PROVIDER_HOST              (default: 127.0.0.1)
  --port N             PROVIDER_PORT, 0 for free  (default: 3001)
  --latency-ms N       PROVIDER_LATENCY_MS        (default: 0)
  --flaky-n N          PROVIDER_FLAKY_N           (default: 1)

exit codes:
  0  stopped by SIGINT or SIGTERM
  1  could not start (port in use)
  2  bad usage
`

export const command: Command = {
  name: 'provider',
  summary: 'run the fake payment provider alone',
  help,
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      options: { host: { type: 'string' }, port: { type: 'string' }, 'latency-ms': { type: 'string' }, 'flaky-n': { type: 'string' } },
      strict: true,
      allowPositionals: true,
    })
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`)
    const env: Record<string, string | undefined> = { ...process.env }
    if (values.host !== undefined) env.PROVIDER_HOST = values.host
    if (values.port !== undefined) env.PROVIDER_PORT = values.port
    if (values['latency-ms'] !== undefined) env.PROVIDER_LATENCY_MS = values['latency-ms']
    if (values['flaky-n'] !== undefined) env.PROVIDER_FLAKY_N = values['flaky-n']
    let settings
    try {
      settings = providerSettings(env)
    } catch (error) {
      if (error instanceof ConfigError) throw new UsageError(error.message)
      throw error
    }
    try {
      await runProvider(settings)
    } catch (error) {
      process.stderr.write(`oncely provider: could not start: ${error instanceof Error ? error.message : String(error)}\n`)
      return EXIT.failure
    }
    return EXIT.ok
  },
}
