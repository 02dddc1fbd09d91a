import pg from 'pg'
import { UsageError } from './command.js'

/** Flags every database command takes. */
export const DATABASE_FLAGS = {
  'database-url': { type: 'string' },
  schema: { type: 'string' },
} as const

export const DATABASE_HELP = `  --database-url URL   PostgreSQL to use (default: $DATABASE_URL)
  --schema NAME        schema holding oncely's tables (default: $ONCELY_SCHEMA, else oncely)`

/** Opens a small pool on the database the flags or the environment name; an empty value counts as unset. */
export function openDatabase(values: { 'database-url'?: string | undefined; schema?: string | undefined }): { pool: pg.Pool; schema: string } {
  const url = nonEmpty(values['database-url']) ?? nonEmpty(process.env.DATABASE_URL)
  if (!url) throw new UsageError('no database: set DATABASE_URL or pass --database-url')
  const schema = nonEmpty(values.schema) ?? nonEmpty(process.env.ONCELY_SCHEMA) ?? 'oncely'
  return { pool: new pg.Pool({ connectionString: url, max: 2 }), schema }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value
}
