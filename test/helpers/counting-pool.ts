import type pg from 'pg'
import type { PoolClientLike, PoolLike, QueryConfig, QueryResult } from '../../src/store/postgres/index.js'

export interface CountingPool extends PoolLike {
  /** The first two words of every statement sent, in order. */
  readonly statements: string[]
  /**
   * Round trips: a statement is one unless it left while an earlier statement of the same
   * pipelining connection (`pipeline: true`) was still unanswered, so it did not wait for it.
   */
  roundTrips(): number
  reset(): void
}

/**
 * Wraps a pool and counts every statement sent to PostgreSQL, through the pool or through a
 * connection checked out for a transaction: the round trips of DESIGN.md's cost budget.
 */
export function countingPool(pool: pg.Pool): CountingPool {
  const statements: string[] = []
  let roundTrips = 0
  const record = (config: QueryConfig) => statements.push(config.text.trim().split(/\s+/).slice(0, 2).join(' '))
  return {
    statements,
    roundTrips: () => roundTrips,
    reset() {
      statements.length = 0
      roundTrips = 0
    },
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      record(config)
      roundTrips++
      const result: QueryResult<unknown> = await pool.query(config)
      return result as QueryResult<R>
    },
    async connect(): Promise<PoolClientLike> {
      const client = await pool.connect()
      const pipeline = (client as unknown as { pipeline?: boolean }).pipeline === true
      let unanswered = 0
      return {
        // Seen by the store as the client it wraps: pipelining or not.
        pipeline,
        async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
          record(config)
          if (!pipeline || unanswered === 0) roundTrips++
          unanswered++
          try {
            const result: QueryResult<unknown> = await client.query(config)
            return result as QueryResult<R>
          } finally {
            unanswered--
          }
        },
        release: (destroy?: boolean | Error) => client.release(destroy),
        // The store listens for a checked-out connection's errors (pg's pool stops listening
        // while it is checked out): without these, a connection that dies while checked out
        // emits an 'error' nobody hears, and the process crashes (seen in give-up.test.ts, where
        // a pipelining connection destroys its own socket on a read timeout).
        on: (event: 'error', listener: (error: Error) => void) => client.on(event, listener),
        off: (event: 'error', listener: (error: Error) => void) => client.off(event, listener),
      } as PoolClientLike
    },
  }
}
