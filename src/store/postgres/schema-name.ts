import { OncelyError } from '../../errors.js'

/** The schema oncely's tables live in. (Default: `oncely`) */
export const DEFAULT_SCHEMA = 'oncely'

/**
 * Quotes a schema name as an SQL identifier, once, at option resolution (docs/conventions.md, SQL): the only
 * value ever interpolated into SQL. Any name PostgreSQL allows is accepted, spaces and capitals
 * included.
 */
export function quoteSchema(schema: unknown): string {
  if (typeof schema !== 'string' || schema.length === 0 || schema.length > 63 || schema.includes('\0')) {
    throw new OncelyError('ONCELY_INVALID_OPTION', `schema must be a non-empty string of at most 63 characters, got ${JSON.stringify(schema)}`)
  }
  return `"${schema.replaceAll('"', '""')}"`
}
