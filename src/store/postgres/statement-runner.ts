/**
 * How the store sends its own statements: bound, named when prepared, never waiting forever, and
 * with a lost connection told apart from a statement's own failure.
 */
import type { WriteStatement } from '../../engine/types.js'
import { OncelyError } from '../../errors.js'
import { toQueryConfig, type PoolClientLike, type PoolLike, type Queryable, type QueryConfig, type QueryResult } from './executor.js'
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
export async function send<R>(
  db: Queryable,
  config: QueryConfig,
  timeoutMs: number,
  what: string,
  onLateAnswer?: (result: QueryResult<R>) => void,
): Promise<QueryResult<R>> {
  let timer: NodeJS.Timeout | undefined
  let gaveUp = false
  const answer = db.query<R>(config)
  answer.then((result) => gaveUp && onLateAnswer?.(result), () => undefined)
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      gaveUp = true
      reject(new OncelyError('ONCELY_STORE_UNAVAILABLE', `PostgreSQL did not answer ${what} within ${timeoutMs} ms`))
    }, timeoutMs)
  })
  try {
    return await Promise.race([answer, deadline])
  } catch (error) {
    throw classified(error, what)
  } finally {
    clearTimeout(timer)
  }
}

/** The handles `transaction` opened and has not yet ended: known to be inside BEGIN … COMMIT. */
const openTransactions = new WeakSet<Queryable>()

/**
 * True when `db` is a handle of a transaction the store opened (its own, or `withTransaction`'s)
 * and has not yet ended, so a caller that must refuse autocommit (the outbox, Invariant 8) need
 * not ask the database.
 */
export function isStoreTransaction(db: Queryable): boolean {
  return openTransactions.has(db)
}

/** Runs `work` with `tx` known as an open transaction (`isStoreTransaction`) until it settles. */
export async function asOpenTransaction<T>(tx: Queryable, work: () => Promise<T>): Promise<T> {
  openTransactions.add(tx)
  try {
    return await work()
  } finally {
    openTransactions.delete(tx)
  }
}

/**
 * Sends BEGIN through `db`. On a pipelining `connection` (`pg`'s `pipeline: true`; the client
 * behind `db` when `db` wraps it) it is not awaited on its own: it leaves with the
 * transaction's first statements, and awaiting `answered` later throws its failure. BEGIN's text is constant and valid: it fails only with the connection, which fails
 * every statement queued behind it as well.
 */
export async function sendBegin(db: Queryable, config: QueryConfig, connection: unknown = db): Promise<{ answered: Promise<unknown> }> {
  const answered = db.query(config)
  // Its failure is thrown where it is awaited; until then it must not count as unhandled.
  answered.catch(() => undefined)
  if (!isPipelining(connection)) await answered
  // Wrapped: an async function returning the promise itself would wait for it.
  return { answered }
}

/** True for a node-postgres connection made with `pipeline: true`. */
export function isPipelining(connection: unknown): boolean {
  return typeof connection === 'object' && connection !== null && (connection as { pipeline?: unknown }).pipeline === true
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

/**
 * BEGIN (with the store's timeouts) … COMMIT on one pooled connection. An error from `work` is
 * passed on as it is after a clean ROLLBACK; when the connection broke on the way (any of its
 * statements failed without a SQLSTATE, or the ROLLBACK failed), it is `ONCELY_STORE_UNAVAILABLE`
 * and the connection is not given back to the pool. On a pipelining connection, a `work` that
 * sends its writes without awaiting each one costs a single round trip before the COMMIT.
 */
export async function transaction<T>(
  pool: PoolLike,
  begin: string,
  timeoutMs: number,
  work: (tx: Queryable) => Promise<T>,
): Promise<T> {
  return inTransaction(new WatchedConnection(await checkOut(pool, timeoutMs)), begin, timeoutMs, work)
}

/**
 * A checked-out connection and whether it broke. pg's pool stops listening for a checked-out
 * connection's errors: one that dies mid-transaction would emit an unhandled 'error' and crash
 * the process. Its queries fail anyway; `broken` notes it, and `giveBack` then has the pool
 * destroy the connection instead of reusing it.
 */
class WatchedConnection {
  broken: unknown
  readonly client: PoolClientLike
  readonly #onError = (error: unknown) => (this.broken ??= error)

  constructor(client: PoolClientLike) {
    this.client = client
    ;(client as Partial<Pick<NodeJS.EventEmitter, 'on'>>).on?.('error', this.#onError)
  }

  /** Sends `config` with the store's timeout unless it has its own; a failure without a SQLSTATE breaks the connection. */
  async query<R>(config: QueryConfig, timeoutMs: number): Promise<QueryResult<R>> {
    try {
      return await this.client.query<R>(config.query_timeout === undefined ? { ...config, query_timeout: timeoutMs } : config)
    } catch (error) {
      if (sqlState(error) === undefined) this.broken ??= error
      throw error
    }
  }

  giveBack(): void {
    const { broken } = this
    this.client.release(broken === undefined ? undefined : broken instanceof Error ? broken : new Error('connection broken'))
    // A broken connection is being destroyed and may still report errors: it keeps the listener.
    if (broken === undefined) (this.client as Partial<Pick<NodeJS.EventEmitter, 'off'>>).off?.('error', this.#onError)
  }
}

/** `transaction` on a connection already checked out, which it gives back. */
async function inTransaction<T>(connection: WatchedConnection, begin: string, timeoutMs: number, work: (tx: Queryable) => Promise<T>): Promise<T> {
  const tx: Queryable = { query: <R>(config: QueryConfig) => connection.query<R>(config, timeoutMs) }
  try {
    const sent = await sendBegin(tx, { text: begin }, connection.client)
    const result = await asOpenTransaction(tx, () => work(tx))
    await sent.answered
    await tx.query({ text: 'COMMIT' })
    return result
  } catch (error) {
    if (connection.broken === undefined) {
      try {
        await connection.client.query({ text: 'ROLLBACK', query_timeout: timeoutMs })
      } catch (rollbackError) {
        connection.broken = rollbackError
      }
    }
    if (connection.broken !== undefined) throw connectionFailure(error, 'a transaction')
    throw error
  } finally {
    connection.giveBack()
  }
}

/**
 * BEGIN, `statements` and COMMIT sent together, without waiting for any answer in between: on a
 * pipelining connection one round trip for the whole transaction (issue 11). Nothing decides
 * between them, so a statement that must stop the commit has to fail in the database: any failure
 * aborts the transaction, every statement behind it fails with 25P02, and the COMMIT answers
 * ROLLBACK. The first failure in sending order is thrown (the cause; the rest only followed it),
 * as `ONCELY_STORE_UNAVAILABLE` when the connection broke. Resolves to the statements' results.
 * A connection that does not pipeline queues them and sends each once the one before has
 * answered: the same transaction, one round trip a statement.
 */
export async function flight(pool: PoolLike, begin: string, timeoutMs: number, writes: readonly WriteStatement[]): Promise<Array<QueryResult<unknown>>> {
  const statements = writes.map(toQueryConfig)
  const connection = new WatchedConnection(await checkOut(pool, timeoutMs))
  try {
    const sent = inOneWrite(connection.client, () => [{ text: begin }, ...statements, { text: 'COMMIT' }].map((config) => connection.query<unknown>(config, timeoutMs)))
    const answers = await Promise.allSettled(sent)
    const failed = answers.find((answer) => answer.status === 'rejected')
    if (failed === undefined) return answers.slice(1, -1).map((answer) => (answer as PromiseFulfilledResult<QueryResult<unknown>>).value)
    // Without a SQLSTATE, the connection itself failed: what was sent may or may not have
    // committed, which the engine finds out by reading its row back.
    if (connection.broken !== undefined) throw connectionFailure(failed.reason, 'a transaction')
    throw failed.reason
  } finally {
    connection.giveBack()
  }
}

/** The socket under a node-postgres client (`client.connection.stream`), when it can be corked. */
function socketOf(client: unknown): { cork(): void; uncork(): void } | undefined {
  const stream = (client as { connection?: { stream?: { cork?: unknown; uncork?: unknown } } } | null)?.connection?.stream
  return typeof stream?.cork === 'function' && typeof stream.uncork === 'function' ? (stream as { cork(): void; uncork(): void }) : undefined
}

/**
 * Runs `send`, which queues statements on `client` synchronously, with the socket corked, so a
 * pipelining connection writes the whole flight in one system call instead of one per statement
 * (node-postgres corks each statement's messages on its own; corks nest, issue 21). A client
 * without a socket to cork (another driver, a wrapper) sends as it would anyway.
 */
export function inOneWrite<T>(client: unknown, send: () => T): T {
  const socket = socketOf(client)
  socket?.cork()
  try {
    return send()
  } finally {
    socket?.uncork()
  }
}

async function checkOut(pool: PoolLike, timeoutMs: number): Promise<PoolClientLike> {
  try {
    return await withTimeout(pool.connect(), timeoutMs, 'a connection')
  } catch (error) {
    throw isTransientPgError(error) || sqlState(error) === undefined ? classified(error, 'a connection') : error
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
