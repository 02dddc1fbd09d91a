import type { WriteStatement } from '../../engine/types.js'

/**
 * What the store needs from a database connection: `query` with a config object. `pg`'s Pool,
 * PoolClient and Client fit as they are; `shims.ts` adapts postgres.js, Kysely, Drizzle and
 * TypeORM transactions to it.
 */
export interface QueryConfig {
  text: string
  values?: unknown[]
  /** Statement name: when set, `pg` prepares it once per connection and reuses the plan. */
  name?: string
  /**
   * Milliseconds after which `pg` stops waiting for the answer and rejects (its own option, which
   * other drivers ignore). The store sets it on its own statements so no request hangs.
   */
  query_timeout?: number
}

/** A write given as a statement (`complete`'s `statements`), as `pg` takes it: its own copy of the values. */
export function toQueryConfig(write: WriteStatement): QueryConfig {
  const config: QueryConfig = { text: write.text, values: write.values === undefined ? [] : [...write.values] }
  if (write.name !== undefined) config.name = write.name
  return config
}

export interface QueryResult<R> {
  rows: R[]
  rowCount: number | null
}

export interface Queryable {
  query<R = Record<string, unknown>>(config: QueryConfig): Promise<QueryResult<R>>
}

/** A connection checked out of a pool; `release` gives it back. */
export interface PoolClientLike extends Queryable {
  release(destroy?: boolean | Error): void
}

/** A `pg`-shaped pool: the store runs single statements on it and checks out one for a transaction. */
export interface PoolLike extends Queryable {
  connect(): Promise<PoolClientLike>
}
