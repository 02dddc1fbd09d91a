import { openRaceServer } from './database-server.js'
import type { RaceReport } from './report.js'
import { PROVIDER_LATENCY_MS, runScenario, STALE_AFTER_MS, type RaceRow } from './run-scenario.js'
import { SCENARIOS, type Scenario } from './scenarios.js'

export interface RaceOptions {
  /** PostgreSQL to run on; undefined starts an embedded one. */
  databaseUrl: string | undefined
  /** Progress lines (to stderr). */
  log: (line: string) => void
  /** Aborted: no further scenario starts, and the run rejects after its cleanup. */
  signal?: AbortSignal
  /** The scenarios to run. (Default: the article's four) */
  scenarios?: readonly Scenario[]
}

/**
 * Runs every scenario, one after the other, each on a database created for it and dropped
 * after, with its own provider and API processes; the server is started (or connected) once.
 */
export async function runRace(options: RaceOptions): Promise<RaceReport> {
  const startedAt = performance.now()
  const server = await openRaceServer(options.databaseUrl, options.log)
  const rows: RaceRow[] = []
  try {
    options.log(`PostgreSQL ${server.version} (${server.source})`)
    const scenarios = options.scenarios ?? SCENARIOS
    for (const [index, scenario] of scenarios.entries()) {
      options.signal?.throwIfAborted()
      const name = `oncely_race_${process.pid}_${index}`
      const url = await server.createDatabase(name)
      try {
        const row = await runScenario(scenario, url, `race-${scenario.strategy}-${scenario.kind}`)
        options.log(`${scenario.strategy}, ${scenario.kind}: ${row.matches ? 'matches' : 'differs'} (${row.durationMs} ms)`)
        options.signal?.throwIfAborted()
        rows.push(row)
      } finally {
        await server.dropDatabase(name)
      }
    }
  } finally {
    await server.close()
  }
  return {
    postgres: { version: server.version, source: server.source },
    providerLatencyMs: PROVIDER_LATENCY_MS,
    staleAfterMs: STALE_AFTER_MS,
    rows,
    matches: rows.length > 0 && rows.every((row) => row.matches),
    durationMs: Math.round(performance.now() - startedAt),
  }
}
