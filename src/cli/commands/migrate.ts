import { parseArgs } from 'node:util'
import { migrate, migrationSql } from '../../store/postgres/index.js'
import { isPartitionCount, MAX_PARTITIONS } from '../../store/postgres/partitions.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase, reportDatabaseFailure } from '../database.js'

export const command: Command = {
  name: 'migrate',
  summary: 'apply the schema to DATABASE_URL (--dry-run prints it)',
  help: `usage: oncely migrate [--dry-run] [--partitions N] [--database-url URL] [--schema NAME]

Applies oncely's numbered migrations, each in its own transaction under an advisory lock:
safe to run twice, and from many processes at once.

  --dry-run            print the SQL that migrate would run on an empty database, and exit
  --partitions N       create the key table PARTITION BY HASH (scope) into N partitions
                       (2 to ${MAX_PARTITIONS}); only on a fresh schema: a schema partitioned the same
                       way is current, any other fails with nothing changed (docs/scale-out.md)
${DATABASE_HELP}

exit codes:
  0  applied, or already current
  1  a migration failed (rolled back), or the lock stayed held past the deadline
  2  bad usage, or no database named
  3  cannot reach the database (refused, unknown host, no such database, authentication)`,
  async run(argv) {
    const { values } = parseArgs({ args: argv, options: { ...DATABASE_FLAGS, 'dry-run': { type: 'boolean' }, partitions: { type: 'string' } }, strict: true })
    const partitions = values.partitions === undefined ? undefined : Number(values.partitions)
    if (partitions !== undefined && (!/^\d+$/.test(values.partitions ?? '') || !isPartitionCount(partitions))) {
      throw new UsageError(`--partitions must be an integer from 2 to ${MAX_PARTITIONS}, got ${JSON.stringify(values.partitions)}`)
    }
    if (values['dry-run']) {
      const schema = values.schema ?? (process.env.ONCELY_SCHEMA || 'oncely')
      process.stdout.write(await migrationSql(schema, { partitions }))
      return EXIT.ok
    }
    const { pool, schema } = openDatabase(values)
    try {
      const { applied, newer } = await migrate({ pool, schema, partitions })
      if (applied.length === 0) process.stdout.write(`schema "${schema}" is current\n`)
      for (const migration of applied) process.stdout.write(`applied ${migration.name}\n`)
      for (const migration of newer) process.stdout.write(`left ${migration.name}, an additive migration of a newer oncely\n`)
      return EXIT.ok
    } catch (error) {
      return reportDatabaseFailure('migrate', error)
    } finally {
      await pool.end()
    }
  },
}
