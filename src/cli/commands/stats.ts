import { parseArgs } from 'node:util'
import { keyStats } from '../../ops/key-stats.js'
import { EXIT, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase } from '../database.js'
import { formatAge, OPS_FLAGS, OPS_HELP, staleAfterFrom, writeJson } from '../ops-output.js'

export const command: Command = {
  name: 'stats',
  summary: 'counts by state, oldest running claim, table size, sweeper lag',
  help: `usage: oncely stats [--json] [--stale-after-ms N]

Counts keys by state (running, stuck, suspended, completed, failed), the oldest running claim,
the key table's size, and the keys past their TTL the sweeper has not deleted yet.

${OPS_HELP}
${DATABASE_HELP}

exit codes: 0 done, 1 the database failed, 2 bad usage or no database`,
  async run(argv) {
    const { values } = parseArgs({ args: argv, options: { ...DATABASE_FLAGS, ...OPS_FLAGS }, strict: true })
    const staleAfterMs = staleAfterFrom(values)
    const { pool, schema } = openDatabase(values)
    try {
      const stats = await keyStats({ pool, schema }, { staleAfterMs })
      if (values.json) {
        writeJson(stats)
        return EXIT.ok
      }
      const { counts, oldestRunning, sweeper } = stats
      process.stdout.write(
        [
          `in_progress  ${counts.inProgress} (held ${counts.held}, suspended ${counts.suspended}, stuck ${counts.stuck})`,
          `completed    ${counts.completed}`,
          `failed       ${counts.failed}`,
          `oldest running claim: ${oldestRunning === null ? 'none' : `created ${formatAge(oldestRunning.ageMs)} ago, lease renewed ${formatAge(oldestRunning.leaseAgeMs)} ago`}`,
          `table size: ${(stats.tableBytes / 1024).toFixed(0)} KiB`,
          `past TTL, not yet swept: ${sweeper.expiredUnswept}${sweeper.expiredUnswept > 0 ? ` (oldest expired ${formatAge(sweeper.lagMs)} ago)` : ''}`,
          '',
        ].join('\n'),
      )
      return EXIT.ok
    } catch (error) {
      process.stderr.write(`oncely stats: ${(error as Error).message}\n`)
      return EXIT.failure
    } finally {
      await pool.end()
    }
  },
}
