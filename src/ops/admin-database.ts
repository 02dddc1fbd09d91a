import { describeKind, invalid, invalidHidden } from '../option-validation.js'
import type { PoolLike, Queryable } from '../store/postgres/executor.js'
import { DEFAULT_SCHEMA, quoteSchema } from '../store/postgres/schema-name.js'
import { buildOpsStatements, statsTableName, type OpsStatements } from '../store/postgres/statements-ops.js'

/** Where the operations functions read and write: the pool and schema of the store. */
export interface AdminDatabase {
  /** A `pg`-shaped pool (`pg.Pool`, or anything with `query` and `connect`). */
  pool: PoolLike
  /** Schema holding oncely's tables. (Default: `oncely`) */
  schema?: string
}

export interface ResolvedAdminDatabase {
  readonly pool: PoolLike
  readonly db: Queryable
  readonly schema: string
  readonly sql: OpsStatements
  /** The value bound as the stats statement's table name. */
  readonly tableName: string
}

const resolved = new WeakMap<PoolLike, Map<string, ResolvedAdminDatabase>>()

/** Validates the target once per pool and schema, and builds its statements (docs/conventions.md, Shape). */
export function resolveAdminDatabase(target: AdminDatabase): ResolvedAdminDatabase {
  if (typeof target !== 'object' || target === null) throw invalid('options', 'must be an object { pool, schema? }', target)
  if (typeof target.pool?.query !== 'function' || typeof target.pool.connect !== 'function') {
    throw invalidHidden('pool', 'must have query() and connect(), like pg.Pool', describeKind(target.pool))
  }
  const schema = target.schema ?? DEFAULT_SCHEMA
  let bySchema = resolved.get(target.pool)
  if (!bySchema) resolved.set(target.pool, (bySchema = new Map<string, ResolvedAdminDatabase>()))
  const known = bySchema.get(schema)
  if (known) return known
  const quoted = quoteSchema(schema)
  const entry = Object.freeze({ pool: target.pool, db: target.pool, schema, sql: buildOpsStatements(quoted), tableName: statsTableName(quoted) })
  bySchema.set(schema, entry)
  return entry
}

/** A `bigint` read as text (ages in ms) as a number; null stays null. */
export function toNumber(value: string | number | null): number | null {
  return value === null ? null : Number(value)
}
