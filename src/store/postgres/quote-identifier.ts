import { invalid } from '../../option-validation.js'

/** PostgreSQL's longest identifier, in bytes (NAMEDATALEN - 1); a longer one is cut with a NOTICE only. */
const MAX_IDENTIFIER_BYTES = 63

/**
 * Quotes a name the user chose (a schema, a table, a NOTIFY channel, a database) as an SQL
 * identifier, once, when the options are resolved: the only text ever put into SQL
 * (docs/conventions.md, SQL). Any name PostgreSQL allows is accepted, spaces, capitals and
 * quotes included; `option` names the option in the error for a name it cannot be. The limit is
 * counted in bytes of UTF-8 (the database's encoding assumed), as the server counts it: a longer
 * name would be cut silently, and two names would be one.
 */
export function quoteIdentifier(option: string, name: unknown): string {
  if (typeof name !== 'string' || name.length === 0 || Buffer.byteLength(name, 'utf8') > MAX_IDENTIFIER_BYTES || name.includes('\0')) {
    throw invalid(option, `must be a non-empty string of at most ${MAX_IDENTIFIER_BYTES} bytes in UTF-8`, name)
  }
  return `"${name.replaceAll('"', '""')}"`
}
