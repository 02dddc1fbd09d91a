import { parseArgs } from 'node:util'
import { migrate, migrationSql } from '../../store/postgres/index.js'
import { EXIT, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase } from '../database.js'

export const command: Command = {
  name: 'migrate',
  summary: 'apply the schema to DATABASE_URL (--dry-run prints it)',
  help: `usage: oncely migrate [--dry-run] [--database-url URL] [--schema NAME]

Applies oncely's numbered migrations, each in its own transaction under an advisory lock:
safe to run twice, and from many processes at once.

  --dry-run            print the SQL that migrate would run on an empty database, and exit
${DATABASE_HELP}

exit codes: 0 applied or already current, 1 a migration failed, 2 bad usage or no database`,
  async run(argv) {
    const { values } = parseArgs({ args: argv, options: { ...DATABASE_FLAGS, 'dry-run': { type: 'boolean' } }, strict: true })
    if (values['dry-run']) {
      const schema = values.schema ?? (process.env.ONCELY_SCHEMA || 'oncely')
      process.stdout.write(await migrationSql(schema))
      return EXIT.ok
    }
    const { pool, schema } = openDatabase(values)
    try {
      const { applied } = await migrate({ pool, schema })
      if (applied.length === 0) process.stdout.write(`schema "${schema}" is current\n`)
      for (const migration of applied) process.stdout.write(`applied ${migration.name}\n`)
      return EXIT.ok
    } catch (error) {
      process.stderr.write(`oncely migrate: ${(error as Error).message}\n`)
      return EXIT.failure
    } finally {
      await pool.end()
    }
  },
}
