import { OncelyError } from '../errors.js'
import { sqlState } from '../store/postgres/pg-errors.js'
import type { Queryable } from '../store/postgres/executor.js'
import { isStoreTransaction } from '../store/postgres/statement-runner.js'
import type { OutboxStatements } from '../store/postgres/statements-outbox.js'

/** SQLSTATE 25P01 no_active_sql_transaction: SAVEPOINT outside a transaction block. */
const NO_ACTIVE_SQL_TRANSACTION = '25P01'

/**
 * Checks, not assumes, that `tx` is inside an open transaction: PostgreSQL refuses `SAVEPOINT`
 * outside a transaction block with 25P01. The savepoint is released at once, so the caller's
 * transaction is left as it was (no subtransaction stays open). Invariant 8: an event, or an
 * inbox row, written in autocommit would commit without the writes it belongs with.
 */
export async function assertInTransaction(tx: Queryable, sql: OutboxStatements, what: string): Promise<void> {
  if (typeof tx !== 'object' || tx === null || typeof tx.query !== 'function') {
    throw new OncelyError('ONCELY_NOT_IN_TRANSACTION', `${what} needs the caller's open transaction (a Queryable); got ${typeof tx}`)
  }
  // The store's own completion transaction is known to be one: no round trip to ask (issue 11).
  if (isStoreTransaction(tx)) return
  try {
    await tx.query({ text: sql.savepoint.text })
  } catch (error) {
    if (causeStates(error).includes(NO_ACTIVE_SQL_TRANSACTION)) {
      throw new OncelyError('ONCELY_NOT_IN_TRANSACTION', `${what} was given a handle outside any transaction: pass the transaction your business writes use`, { cause: error })
    }
    throw error
  }
  await tx.query({ text: sql.releaseSavepoint.text })
}

/** The SQLSTATEs of an error and of its causes: Drizzle wraps the driver's error in its own. */
function causeStates(error: unknown): Array<string | undefined> {
  const states: Array<string | undefined> = []
  for (let current = error, depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    states.push(sqlState(current))
    current = (current as { cause?: unknown }).cause
  }
  return states
}
