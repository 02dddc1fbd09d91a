import type { WriteStatement } from '../../engine/types.js'
import { asOpenTransaction, sendBegin } from './statement-runner.js'

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

/**
 * Runs `work` inside BEGIN … COMMIT on one pooled connection, rolling back on any error. On a
 * pipelining pool (`new pg.Pool({ pipeline: true })`) BEGIN leaves with `work`'s first statements.
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { withTransaction } from 'oncely/postgres'
 * const pool = new pg.Pool()
 * await withTransaction(pool, async (tx) => {
 *   await tx.query({ text: 'INSERT INTO orders (id) VALUES ($1)', values: [42] })
 * })
 * ```
 */
export async function withTransaction<T>(pool: PoolLike, work: (tx: Queryable) => Promise<T>): Promise<T> {
  const client = await pool.connect()
  let broken: unknown
  try {
    const begin = await sendBegin(client, { text: 'BEGIN' })
    // Known as a transaction: the outbox's enqueue need not ask the database (issue 11).
    const result = await asOpenTransaction(client, () => work(client))
    await begin.answered
    await client.query({ text: 'COMMIT' })
    return result
  } catch (error) {
    try {
      await client.query({ text: 'ROLLBACK' })
    } catch (rollbackError) {
      // A connection that cannot roll back is not given back to the pool.
      broken = rollbackError
    }
    throw error
  } finally {
    client.release(broken instanceof Error ? broken : undefined)
  }
}
