import type pg from 'pg'
import type { PoolClientLike, PoolLike, QueryConfig, QueryResult } from '../../src/store/postgres/index.js'

/**
 * Wraps a pool and counts every statement sent to PostgreSQL, through the pool or through a
 * connection checked out for a transaction: the round trips of DESIGN.md's cost budget.
 */
export function countingPool(pool: pg.Pool): PoolLike & { statements: string[]; reset(): void } {
  const statements: string[] = []
  const record = (config: QueryConfig) => statements.push(config.text.trim().split(/\s+/).slice(0, 2).join(' '))
  return {
    statements,
    reset() {
      statements.length = 0
    },
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      record(config)
      const result: QueryResult<unknown> = await pool.query(config)
      return result as QueryResult<R>
    },
    async connect(): Promise<PoolClientLike> {
      const client = await pool.connect()
      return {
        async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
          record(config)
          const result: QueryResult<unknown> = await client.query(config)
          return result as QueryResult<R>
        },
        release: (destroy?: boolean | Error) => client.release(destroy),
      }
    },
  }
}
