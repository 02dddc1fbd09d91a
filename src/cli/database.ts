import path from 'node:path'
import pg from 'pg'
import { runningServer } from '../embedded-postgres/running-server.js'
import { embeddedPostgresUrl } from '../embedded-postgres/start.js'
import { sqlState } from '../store/postgres/pg-errors.js'
import { EXIT, UsageError } from './command.js'

/** Flags every database command takes. */
export const DATABASE_FLAGS = {
  'database-url': { type: 'string' },
  schema: { type: 'string' },
} as const

export const DATABASE_HELP = `  --database-url URL   PostgreSQL to use (default: $DATABASE_URL; unset: the embedded
                       PostgreSQL of \`npm start\` in this folder, when it runs)
  --schema NAME        schema holding oncely's tables (default: $ONCELY_SCHEMA, else oncely)`

/**
 * Opens a small pool on the database the flags or the environment name (an empty value counts as
 * unset); with neither, on the embedded PostgreSQL that `npm start` runs in this folder
 * (`$ONCELY_DATA_DIR`, else `./.oncely/pg`), found through its `postmaster.pid`.
 */
export function openDatabase(values: { 'database-url'?: string | undefined; schema?: string | undefined }): { pool: pg.Pool; schema: string } {
  const url = nonEmpty(values['database-url']) ?? nonEmpty(process.env.DATABASE_URL) ?? embeddedDatabaseHere()
  if (!url) throw new UsageError('no database: set DATABASE_URL, pass --database-url, or run `npm start` in this folder (its embedded PostgreSQL is used then)')
  const schema = nonEmpty(values.schema) ?? nonEmpty(process.env.ONCELY_SCHEMA) ?? 'oncely'
  return { pool: new pg.Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 10_000 }), schema }
}

function embeddedDatabaseHere(): string | undefined {
  const dataDir = path.resolve(nonEmpty(process.env.ONCELY_DATA_DIR) ?? '.oncely/pg')
  const server = runningServer(dataDir)
  if (!server) return undefined
  process.stderr.write(`oncely: DATABASE_URL is unset: using the embedded PostgreSQL running in ${dataDir}\n`)
  return embeddedPostgresUrl(server.port)
}

/** SQLSTATE classes and codes that mean "never reached a usable database", not "the command failed there". */
const UNREACHABLE_SQLSTATES = ['3D000', '28000', '28P01', '57P03']
const UNREACHABLE_ERRNOS = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNRESET'])

/** Whether `error` says the database could not be reached (connection, missing database, authentication). */
export function isUnreachable(error: unknown): boolean {
  const state = sqlState(error)
  if (state !== undefined) return state.startsWith('08') || UNREACHABLE_SQLSTATES.includes(state)
  const errno = typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : undefined
  if (errno !== undefined && UNREACHABLE_ERRNOS.has(errno)) return true
  // Node reports a refused dual-stack connect as an AggregateError of one error per address.
  return error instanceof AggregateError && error.errors.some(isUnreachable)
}

/**
 * Prints a database command's failure as one line on stderr (never a stack trace) and returns
 * its exit code: `EXIT.unreachable` when the database could not be reached, `EXIT.failure` else.
 */
export function reportDatabaseFailure(command: string, error: unknown): number {
  const detail = error instanceof Error ? error.message || error.name : String(error)
  if (isUnreachable(error)) {
    process.stderr.write(`oncely ${command}: cannot reach the database: ${detail || 'connection refused'}\n`)
    return EXIT.unreachable
  }
  process.stderr.write(`oncely ${command}: ${detail}\n`)
  return EXIT.failure
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value
}
