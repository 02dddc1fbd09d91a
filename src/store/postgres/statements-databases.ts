/**
 * Statements on whole databases, for `oncely race`, which gives each scenario an empty database
 * of its own on one server. Split from statements.ts by area (docs/conventions.md, SQL). Neither
 * CREATE DATABASE nor DROP DATABASE takes parameters, so the database's name is interpolated,
 * quoted as an identifier.
 */
import { quoteIdentifier } from './quote-identifier.js'

export interface ServerVersionRow {
  server_version: string
}

/** The server's version, for the race's report. */
export const SHOW_SERVER_VERSION = 'SHOW server_version'

/** `create` and `drop` one database; `drop` also ends its open sessions (PostgreSQL 13 and later). */
export function buildDatabaseStatements(name: string): { create: string; drop: string } {
  const quoted = quoteIdentifier('database', name)
  return { create: `CREATE DATABASE ${quoted}`, drop: `DROP DATABASE IF EXISTS ${quoted} WITH (FORCE)` }
}
