import type { WriteStatement } from '../../engine/types.js'
import { positiveInteger } from '../../option-validation.js'
import type { PoolLike } from './executor.js'
import { flight } from './statement-runner.js'
import { DEFAULT_STATEMENT_TIMEOUT_MS } from './store.js'

export interface OneFlightOptions {
  /**
   * Milliseconds before the flight is given up on (its connection destroyed): from when its
   * statements leave together to the last answer; where they leave one by one (below), each
   * statement's own. (Default: 5000)
   */
  timeoutMs?: number
}

/**
 * Commits `statements` in one transaction sent whole: BEGIN, the statements in order and COMMIT
 * leave together on one pooled connection, none waiting for another's answer. A `pg` pool spends
 * one round trip on them, pipelining or not: they go as one query with a single Sync, answered at
 * once. (A named statement a connection has not prepared yet goes `pg`'s own way the first time,
 * one round trip a statement unless the pool pipelines; so does every statement on a driver
 * other than `pg`.) For writes that decide nothing between them: any failure rolls
 * the whole transaction back and rejects with the first statement's error (with
 * `ONCELY_STORE_UNAVAILABLE` when the connection broke). Writes that read an earlier one's result
 * belong in `withTransaction`.
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { writeInOneFlight } from 'oncely/postgres'
 * const pool = new pg.Pool({ pipeline: true })
 * await writeInOneFlight(pool, [
 *   { text: 'INSERT INTO orders (id) VALUES ($1)', values: [42] },
 *   { text: 'INSERT INTO order_lines (order_id, sku) VALUES ($1, $2)', values: [42, 'a'] },
 * ])
 * ```
 */
export async function writeInOneFlight(pool: PoolLike, statements: readonly WriteStatement[], options: OneFlightOptions = {}): Promise<void> {
  const timeoutMs = positiveInteger('timeoutMs', options.timeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS)
  await flight(pool, ['BEGIN'], timeoutMs, statements)
}
