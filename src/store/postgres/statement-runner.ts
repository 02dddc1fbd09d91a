/**
 * How the store sends its own statements: bound, named when prepared, never waiting forever, and
 * with a lost connection told apart from a statement's own failure.
 */
import { OncelyError } from '../../errors.js'
import type { PoolClientLike, PoolLike, Queryable, QueryConfig, QueryResult } from './executor.js'
import { isTransientPgError, sqlState } from './pg-errors.js'
import type { Statement } from './statements.js'

export function bind(statement: Statement, values: unknown[], timeoutMs?: number): QueryConfig {
  const config: QueryConfig = statement.name === undefined ? { text: statement.text, values } : { name: statement.name, text: statement.text, values }
  if (timeoutMs !== undefined) config.query_timeout = timeoutMs
  return config
}

/**
 * An error without a SQLSTATE from one of the store's own statements is the connection's, not
 * the statement's (node-postgres raises a lost connection as a plain Error): it becomes
 * `ONCELY_STORE_UNAVAILABLE`, which the engine retries, recognising its own write if the
 * statement committed before the answer was lost.
 */
export function connectionFailure(cause: unknown, what: string): OncelyError {
  return new OncelyError('ONCELY_STORE_UNAVAILABLE', `the connection to PostgreSQL failed during ${what}`, { cause })
}

function classified(error: unknown, what: string): unknown {
  if (error instanceof OncelyError) return error
  return sqlState(error) === undefined ? connectionFailure(error, what) : error
}

/**
 * Sends one statement on `db`, giving up after `timeoutMs` even when the driver cannot (a pool
 * waiting for a connection to a server that drops packets). A statement given up on may still
 * run: the claim statements carry their own lock deadline, and fenced writes are recognised.
 */
export async function send<R>(db: Queryable, config: QueryConfig, timeoutMs: number, what: string): Promise<QueryResult<R>> {
  let timer: NodeJS.Timeout | undefined
  const answer = db.query<R>(config)
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new OncelyError('ONCELY_STORE_UNAVAILABLE', `PostgreSQL did not answer ${what} within ${timeoutMs} ms`)), timeoutMs)
  })
  // The answer may come after the deadline: it is dropped, never left as an unhandled rejection.
  answer.catch(() => undefined)
  try {
    return await Promise.race([answer, deadline])
  } catch (error) {
    throw classified(error, what)
  } finally {
    clearTimeout(timer)
  }
}

/**
 * BEGIN (with the store's timeouts) … COMMIT on one pooled connection. An error from `work` is
 * passed on as it is after a clean ROLLBACK; when the connection broke on the way (any of its
 * statements failed without a SQLSTATE, or the ROLLBACK failed), it is `ONCELY_STORE_UNAVAILABLE`
 * and the connection is not given back to the pool.
 */
export async function transaction<T>(
  pool: PoolLike,
  begin: string,
  timeoutMs: number,
  work: (tx: Queryable) => Promise<T>,
): Promise<T> {
  let client: PoolClientLike
  try {
    client = await withTimeout(pool.connect(), timeoutMs, 'a connection')
  } catch (error) {
    throw isTransientPgError(error) || sqlState(error) === undefined ? classified(error, 'a connection') : error
  }
  let broken: unknown
  // pg's pool stops listening for a checked-out connection's errors: one that dies mid-transaction
  // would emit an unhandled 'error' and crash the process. Its queries fail anyway; note it here.
  const onError = (error: unknown) => (broken ??= error)
  const events = client as Partial<Pick<NodeJS.EventEmitter, 'on' | 'off'>>
  events.on?.('error', onError)
  const tx: Queryable = {
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      try {
        return await client.query<R>(config.query_timeout === undefined ? { ...config, query_timeout: timeoutMs } : config)
      } catch (error) {
        if (sqlState(error) === undefined) broken ??= error
        throw error
      }
    },
  }
  try {
    await tx.query({ text: begin })
    const result = await work(tx)
    await tx.query({ text: 'COMMIT' })
    return result
  } catch (error) {
    if (broken === undefined) {
      try {
        await client.query({ text: 'ROLLBACK', query_timeout: timeoutMs })
      } catch (rollbackError) {
        broken = rollbackError
      }
    }
    if (broken !== undefined) throw connectionFailure(error, 'a transaction')
    throw error
  } finally {
    client.release(broken === undefined ? undefined : broken instanceof Error ? broken : new Error('connection broken'))
    // A broken connection is being destroyed and may still report errors: it keeps the listener.
    if (broken === undefined) events.off?.('error', onError)
  }
}

async function withTimeout<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  let timedOut = false
  promise.then(
    (value) => {
      // A connection handed over after the deadline goes straight back to the pool.
      if (timedOut && typeof (value as { release?: unknown }).release === 'function') (value as unknown as PoolClientLike).release()
    },
    () => undefined,
  )
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true
      reject(new OncelyError('ONCELY_STORE_UNAVAILABLE', `PostgreSQL did not hand over ${what} within ${timeoutMs} ms`))
    }, timeoutMs)
  })
  try {
    return await Promise.race([promise, deadline])
  } finally {
    clearTimeout(timer)
  }
}
