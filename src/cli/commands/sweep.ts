import { parseArgs } from 'node:util'
import { sweepExpiredKeys } from '../../ops/sweeper.js'
import { createPostgresStore } from '../../store/postgres/index.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase, reportDatabaseFailure } from '../database.js'

export const command: Command = {
  name: 'sweep',
  summary: 'delete expired keys in small batches',
  help: `usage: oncely sweep [--batch-size N] [--max-batches N] [--pause-ms N] [--database-url URL] [--schema NAME]

Deletes expired idempotency keys in small batches that skip locked rows and re-check expiry,
so it never removes a key a request is reclaiming. Prints the number deleted. Run it from cron.

  --batch-size N       keys per batch (default 500)
  --max-batches N      stop after N batches (default 1000)
  --pause-ms N         pause between batches (default 0)
${DATABASE_HELP}

exit codes:
  0  done
  1  the sweep failed on the database
  2  bad usage (a flag out of range), or no database named
  3  cannot reach the database (refused, unknown host, no such database, authentication)`,
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      options: { ...DATABASE_FLAGS, 'batch-size': { type: 'string' }, 'max-batches': { type: 'string' }, 'pause-ms': { type: 'string' } },
      strict: true,
    })
    const batchSize = integerFlag('batch-size', values['batch-size'], 500, 1)
    const maxBatches = integerFlag('max-batches', values['max-batches'], 1000, 1)
    const pauseMs = integerFlag('pause-ms', values['pause-ms'], 0, 0)
    const { pool, schema } = openDatabase(values)
    try {
      const result = await sweepExpiredKeys(createPostgresStore({ pool, schema }), { batchSize, maxBatches, pauseMs })
      process.stdout.write(`deleted ${result.deleted} expired keys in ${result.batches} batches\n`)
      return EXIT.ok
    } catch (error) {
      return reportDatabaseFailure('sweep', error)
    } finally {
      await pool.end()
    }
  },
}

function integerFlag(name: string, value: string | undefined, fallback: number, min: number): number {
  if (value === undefined) return fallback
  const parsed = /^\d+$/.test(value) ? Number(value) : Number.NaN
  if (!Number.isSafeInteger(parsed) || parsed < min) throw new UsageError(`--${name} must be a whole number of at least ${min}, got ${JSON.stringify(value)}`)
  return parsed
}
