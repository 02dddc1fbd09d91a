import { parseArgs } from 'node:util'
import { killChildren } from '../race/child-process.js'
import { formatTable, type RaceReport } from '../race/report.js'
import { runRace } from '../race/run-race.js'
import { EXIT, UsageError, type Command } from '../command.js'

const help = `usage: oncely race [--json] [--quiet] [--database-url URL]

Reproduces the article's measured table (docs/race.md) on real PostgreSQL, with
the real reference service and fake provider as child processes, each scenario
on a database created for it and dropped after:

  select-for-update      two concurrent requests, one key    201 and 500, 1 charge
  atomic-phases          two concurrent requests, one key    201 and 409, 1 charge
  claim-in-transaction   crash after the provider, a retry   2 charges
  atomic-phases          crash after the provider, a retry   1 charge

The provider takes 0.5 s per charge. A crash is a real SIGKILL of the API (CHAOS=1,
X-Chaos-Crash: after-provider); the API is restarted on the same database and the
same request retried every 0.2 s until the answer is not 409. Prints the table as
measured, with the PostgreSQL version.

flags:
  --json               print the report as JSON instead of the table
  --quiet              no progress lines on stderr
  --database-url URL   PostgreSQL to use, as a superuser or a role that may
                       CREATE DATABASE (default: $DATABASE_URL; unset or empty:
                       an embedded PostgreSQL in a temporary folder)

exit codes:
  0    every row matches the article
  1    a row differs, or a scenario could not run
  2    bad usage
  130  interrupted (SIGINT; 143 for SIGTERM), after cleaning up
`

export const command: Command = {
  name: 'race',
  summary: "reproduce the article's measured table",
  help,
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      options: { json: { type: 'boolean' }, quiet: { type: 'boolean' }, 'database-url': { type: 'string' } },
      strict: true,
      allowPositionals: true,
    })
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`)
    const databaseUrl = nonEmpty(values['database-url']) ?? nonEmpty(process.env.DATABASE_URL)
    const log = values.quiet === true ? () => {} : (line: string) => process.stderr.write(`oncely race: ${line}\n`)
    const interrupt = stopOnSignal(log)
    let report: RaceReport
    try {
      report = await runRace({ databaseUrl, log, signal: interrupt.signal })
    } catch (error) {
      const interrupted = interrupt.code()
      if (interrupted !== undefined) return interrupted
      process.stderr.write(`oncely race: ${error instanceof Error ? error.message : String(error)}\n`)
      return EXIT.failure
    } finally {
      interrupt.remove()
    }
    const interrupted = interrupt.code()
    if (interrupted !== undefined) return interrupted
    process.stdout.write(values.json === true ? `${JSON.stringify(report, null, 2)}\n` : formatTable(report))
    return report.matches ? EXIT.ok : EXIT.failure
  },
}

/**
 * On SIGINT or SIGTERM, kills the service and provider processes, so the scenario running fails
 * at once and the run unwinds through its cleanup (databases dropped, embedded server stopped);
 * the command then exits 130 or 143. A cleanup that hangs, or a second signal, exits at once.
 */
function stopOnSignal(log: (line: string) => void): { signal: AbortSignal; code(): number | undefined; remove(): void } {
  const controller = new AbortController()
  let code: number | undefined
  const onSignal = (signal: NodeJS.Signals) => {
    if (code !== undefined) process.exit(code)
    code = signal === 'SIGINT' ? 130 : 143
    log(`${signal}: stopping the processes and cleaning up`)
    controller.abort(new Error(`interrupted by ${signal}`))
    killChildren()
    setTimeout(() => process.exit(code), 15_000).unref()
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  return {
    signal: controller.signal,
    code: () => code,
    remove() {
      process.off('SIGINT', onSignal)
      process.off('SIGTERM', onSignal)
    },
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value
}
