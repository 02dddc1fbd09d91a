import { parseArgs } from 'node:util'
import { checkSchema } from '../../store/postgres/index.js'
import { EXIT, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase, reportDatabaseFailure } from '../database.js'

export const command: Command = {
  name: 'doctor',
  summary: 'compare the live schema with the expected one',
  help: `usage: oncely doctor [--json] [--database-url URL] [--schema NAME]

Compares the live schema (columns, indexes, constraints, applied migrations) with the one this
version of oncely expects, built from its own migrations in a transaction that is rolled back.

  --json               print the report as JSON
${DATABASE_HELP}

exit codes:
  0  the schema matches
  1  the schema differs (each difference listed on stdout), or the check failed
  2  bad usage, or no database named
  3  cannot reach the database (refused, unknown host, no such database, authentication)`,
  async run(argv) {
    const { values } = parseArgs({ args: argv, options: { ...DATABASE_FLAGS, json: { type: 'boolean' } }, strict: true })
    const { pool, schema } = openDatabase(values)
    try {
      const report = await checkSchema({ pool, schema })
      if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`)
      else if (report.ok) process.stdout.write(`schema "${schema}" matches this version of oncely\n`)
      else process.stdout.write(`schema "${schema}" differs:\n${report.problems.map((p) => `  - ${p.detail}`).join('\n')}\n`)
      return report.ok ? EXIT.ok : EXIT.failure
    } catch (error) {
      return reportDatabaseFailure('doctor', error)
    } finally {
      await pool.end()
    }
  },
}
