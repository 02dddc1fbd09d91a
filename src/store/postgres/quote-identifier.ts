import { invalid } from '../../option-validation.js'

/**
 * Quotes a name the user chose (a schema, a table, a NOTIFY channel, a database) as an SQL
 * identifier, once, when the options are resolved: the only text ever put into SQL
 * (docs/conventions.md, SQL). Any name PostgreSQL allows is accepted, spaces, capitals and
 * quotes included; `option` names the option in the error for a name it cannot be.
 */
export function quoteIdentifier(option: string, name: unknown): string {
  if (typeof name !== 'string' || name.length === 0 || name.length > 63 || name.includes('\0')) {
    throw invalid(option, 'must be a non-empty string of at most 63 characters', name)
  }
  return `"${name.replaceAll('"', '""')}"`
}
