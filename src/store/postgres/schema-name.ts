import { quoteIdentifier } from './quote-identifier.js'

/** The schema oncely's tables live in. (Default: `oncely`) */
export const DEFAULT_SCHEMA = 'oncely'

/**
 * Quotes a schema name as an SQL identifier, once, at option resolution (docs/conventions.md,
 * SQL). Any name PostgreSQL allows is accepted, spaces and capitals included.
 */
export function quoteSchema(schema: unknown): string {
  return quoteIdentifier('schema', schema)
}
