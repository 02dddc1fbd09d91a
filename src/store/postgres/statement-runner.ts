/**
 * How the store sends its own statements: bound, named when prepared, never waiting forever, and
 * with a lost connection told apart from a statement's own failure.
 */
import type { WriteStatement } from '../../engine/types.js'
import { OncelyError } from '../../errors.js'
import { toQueryConfig, type PoolClientLike, type PoolLike, type Queryable, type QueryConfig, type QueryResult } from './executor.js'
import { oneSyncSender } from './one-sync.js'
import { sqlState } from './pg-errors.js'
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
  try {
    return await withDeadline(db.query<R>(config), timeoutMs, () => `PostgreSQL did not answer ${what} within ${timeoutMs} ms`, onLateAnswer)
  } catch (error) {
    throw classified(error, what)
  }
}

/**
 * `promise`, or `ONCELY_STORE_UNAVAILABLE` with `message()` once `timeoutMs` have passed; what it
 * resolves to after that goes to `onLate` (a connection handed over late goes back to the pool).
 * One promise and one timer per call, the message built only when it is thrown: every statement
 * and checkout of the store passes through here (issue 21).
 */
function withDeadline<T>(promise: Promise<T>, timeoutMs: number, message: () => string, onLate?: (value: T) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let late = false
    const timer = setTimeout(() => {
      late = true
      reject(new OncelyError('ONCELY_STORE_UNAVAILABLE', message()))
    }, timeoutMs)
    promise.then(
      (value) => {
        if (late) return onLate?.(value)
        clearTimeout(timer)
        resolve(value)
      },
      // Passed on as it was thrown, as awaiting `promise` would.
      (error: Error) => {
        if (late) return
        clearTimeout(timer)
        reject(error instanceof Error ? error : new Error(String(error)))
      },
    )
  })
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

/** The handles of the store's own transactions (`transaction` with a timeout), by the connection that sends for them. */
const ownTransactions = new WeakMap<Queryable, WatchedConnection>()

/**
 * For `tx`, an open transaction of the store's own: a handle whose statement is that
 * transaction's last, sent with its COMMIT as one query with a single Sync where the connection
 * takes it (one round trip for both), so the transaction's own COMMIT is then left out; where it
 * cannot, the statement alone, the COMMIT following as usual. Undefined for any other handle:
 * a caller's own transaction is never committed here. After a statement that fails, the COMMIT
 * was skipped by the server and the transaction rolls back.
 */
export function lastStatementOf(tx: Queryable): Queryable | undefined {
  const connection = openTransactions.has(tx) ? ownTransactions.get(tx) : undefined
  return connection === undefined ? undefined : { query: <R>(config: QueryConfig) => connection.query<R>(config, true) }
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
  return transaction(pool, PLAIN_BEGIN, undefined, work)
}

/** BEGIN's commands, one each, and joined into the one simple query that opens a transaction. */
export interface Begin {
  readonly commands: readonly string[]
  readonly text: string
}

/** `commands` as a `Begin`: joined once, not at every transaction. */
export function beginOf(commands: readonly string[]): Begin {
  return Object.freeze({ commands: Object.freeze([...commands]), text: commands.join('; ') })
}

const PLAIN_BEGIN = beginOf(['BEGIN'])

/**
 * The one BEGIN … COMMIT runner, on one pooled connection: `withTransaction`'s and the store's.
 * Any error rolls back and is passed on as it is; a connection that broke on the way (it reported
 * an error, or the ROLLBACK failed) is not given back to the pool. With `timeoutMs`, the store's
 * own transactions (`begin` holding its timeouts): the connection and every statement without a
 * `query_timeout` of its own are given up on after it, a statement failing without a SQLSTATE
 * breaks the connection, and an error on a broken connection is `ONCELY_STORE_UNAVAILABLE`.
 * Without it (`withTransaction`), nothing is timed, errors are the driver's, and `work` is handed
 * the pool's own client, all of its API. On a pipelining connection, a `work` that sends its
 * statements without awaiting each other has them leave with BEGIN in one write. On a store's
 * transaction over a connection that does not pipeline, BEGIN's commands wait for `work`'s first
 * statement and leave with it (`WatchedConnection.inTransactionOpenedByFirst`); a `work` that sent nothing
 * opened nothing, and nothing is committed or rolled back.
 */
export async function transaction<T>(
  pool: PoolLike,
  begin: Begin,
  timeoutMs: number | undefined,
  work: (tx: Queryable) => Promise<T>,
): Promise<T> {
  return onConnection(pool, timeoutMs, async (connection) => {
    if (timeoutMs !== undefined) ownTransactions.set(connection.tx, connection)
    if (timeoutMs !== undefined && !isPipelining(connection.client)) return connection.inTransactionOpenedByFirst(begin, work)
    const tx = timeoutMs === undefined ? connection.client : connection.tx
    // On a pipelining connection BEGIN is not awaited: corked, it leaves in one write with the
    // statements `work` sends before its first await, not in a write of its own (issue 21).
    const socket = isPipelining(connection.client) ? connection.socket : undefined
    socket?.cork()
    let corked = socket !== undefined
    const uncork = () => {
      if (corked) socket?.uncork()
      corked = false
    }
    try {
      const sent = await sendBegin(tx, { text: begin.text }, connection.client)
      const working = asOpenTransaction(tx, () => work(tx))
      uncork()
      const result = await working
      await sent.answered
      if (!connection.committed) await tx.query({ text: 'COMMIT' })
      return result
    } catch (error) {
      // A corked ROLLBACK would never leave.
      uncork()
      if (connection.broken === undefined) {
        try {
          await tx.query({ text: 'ROLLBACK' })
        } catch (rollbackError) {
          connection.broken = rollbackError
        }
      }
      throw error
    }
  })
}

/**
 * BEGIN (`begin`: its commands, one each), `statements` and COMMIT sent together, without waiting
 * for any answer in between (issue 11). On a node-postgres connection that has prepared the named
 * ones, as one query with a single Sync (one-sync.ts): one round trip and one answer for the whole
 * transaction, pipelining or not (issue 21). Nothing decides between them, so a statement that
 * must stop the commit has to fail in the database: the server then runs nothing more, the
 * transaction is rolled back, and its failure is thrown, as `ONCELY_STORE_UNAVAILABLE` when the
 * connection broke. Resolves to the statements' results. Any other connection takes them as
 * `sendWhole` sends them: on a pipelining one still in one write; on one that does not pipeline,
 * each once the one before has answered (`WatchedConnection.query`), one round trip a statement.
 */
export async function flight(pool: PoolLike, begin: readonly string[], timeoutMs: number, writes: readonly WriteStatement[]): Promise<Array<QueryResult<unknown>>> {
  const statements = writes.map(toQueryConfig)
  // Without a SQLSTATE, the failure thrown is the connection's: what was sent may or may not
  // have committed, which the engine finds out by reading its row back (`onConnection`).
  return onConnection(pool, timeoutMs, (connection) => connection.sendTransaction(begin, statements))
}

/**
 * A transaction of two flights on one pooled connection, untimed like `withTransaction`: BEGIN
 * with `first`, then the statement `next` makes of `first`'s result (none: COMMIT alone) with the
 * COMMIT. For a transaction whose second statement needs the first's answer and whose COMMIT needs
 * nothing: on a `pg` connection each flight is one query with a single Sync (one-sync.ts), two
 * round trips and two answers of the server's for the whole, where BEGIN, the two statements and
 * COMMIT cost four of each on a plain connection (issue 21: the relay's claim). Elsewhere they go
 * one after another. Resolves to the two results; any failure rolls back and is thrown as it is.
 */
export async function transactionInTwoFlights<R>(
  pool: PoolLike,
  first: QueryConfig,
  next: (result: QueryResult<R>) => QueryConfig | undefined,
): Promise<[QueryResult<R>, QueryResult<R> | undefined]> {
  return onConnection(pool, undefined, (connection) => connection.sendInTwoFlights(first, next))
}

/** Runs `run` on a connection checked out of `pool` (within `timeoutMs`, when given), then gives it back. */
async function onConnection<T>(pool: PoolLike, timeoutMs: number | undefined, run: (connection: WatchedConnection) => Promise<T>): Promise<T> {
  const connection = new WatchedConnection(await checkOut(pool, timeoutMs), timeoutMs)
  try {
    return await run(connection)
  } catch (error) {
    if (connection.broken !== undefined && timeoutMs !== undefined) throw connectionFailure(error, 'a transaction')
    throw error
  } finally {
    connection.giveBack()
  }
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
  /** The connection as `work` is handed it: every statement goes through `query`. */
  readonly tx: Queryable = { query: <R>(config: QueryConfig) => this.query<R>(config) }
  readonly #timeoutMs: number | undefined
  readonly #pipelining: boolean
  /**
   * The client's socket, found once per checkout: corked around a flight, destroyed when it is
   * given up on. Only a node-postgres client has one, and it takes a callback: the next statement
   * then leaves from it.
   */
  readonly socket: CorkableSocket | undefined
  /** Statements held back until the one before has answered, on a connection that does not pipeline. */
  readonly #waiting: Array<() => void> = []
  #busy = false
  /** BEGIN, held back to leave with the transaction's first statement (`inTransactionOpenedByFirst`). */
  #opening: Begin | undefined
  /** BEGIN has been handed to the connection, alone or with a statement: the transaction has to end. */
  #opened = false
  /** The COMMIT has left with the transaction's last statement (`lastStatementOf`). */
  committed = false
  readonly #onError = (error: unknown) => (this.broken ??= error)

  constructor(client: PoolClientLike, timeoutMs: number | undefined) {
    this.client = client
    this.#timeoutMs = timeoutMs
    this.#pipelining = isPipelining(client)
    this.socket = socketOf(client)
    ;(client as Partial<Pick<NodeJS.EventEmitter, 'on'>>).on?.('error', this.#onError)
  }

  /**
   * Sends `config`, with the store's timeout unless it has its own. A pipelining connection takes
   * it at once (synchronously: a flight corked around it leaves in one write). Any other is handed
   * it only once the statement before has answered: node-postgres deprecates handing a query to a
   * connection still executing one (pg 9 refuses it), and would only have queued it, so the round
   * trips are the same. Behind a statement that broke the connection, nothing more is sent.
   */
  query<R>(config: QueryConfig, commit = false): Promise<QueryResult<R>> {
    if (this.#pipelining) {
      const withCommit = commit ? this.#sentWhole<R>(undefined, config, commit) : undefined
      return withCommit ?? new Promise((resolve, reject) => this.#sendThen<R>(config, (error, result) => (error === undefined ? resolve(result as QueryResult<R>) : reject(error))))
    }
    const opening = this.#takeOpening()
    return new Promise<QueryResult<R>>((resolve, reject) => {
      this.#waiting.push(() => {
        if (this.broken !== undefined) {
          this.#answered(() => reject(new Error('not sent: the connection broke before it', { cause: this.broken })))
          return
        }
        const done = (error: Error | undefined, result?: QueryResult<R>) => this.#answered(() => (error === undefined ? resolve(result as QueryResult<R>) : reject(error)))
        const whole = this.#sentWhole<R>(opening, config, commit)
        if (whole !== undefined) whole.then((result) => done(undefined, result), done)
        else if (opening === undefined) this.#sendThen<R>(config, done)
        else this.#sendThen({ text: opening.text }, (error) => (error === undefined ? this.#sendThen<R>(config, done) : done(error)))
      })
      if (!this.#busy) this.#next()
    })
  }

  /**
   * Sends every one of `statements` (a bare string is a statement without values) and resolves to
   * their results in order once all have answered, or rejects with the first failure in sending
   * order. A pipelining node-postgres connection takes them all at once, in one socket write,
   * answered through callbacks, under one deadline for the whole: its statements left together,
   * so the store's timeout per statement would have run out for all of them at the same moment
   * anyway. At it, the connection is given up (destroyed; the statements fail with it). Any other
   * sends them one by one through `query`, each with the store's timeout.
   */
  sendWhole(statements: ReadonlyArray<QueryConfig | string>): Promise<Array<QueryResult<unknown>>> {
    const socket = this.#pipelining ? this.socket : undefined
    if (socket === undefined) return this.#queryEach(statements)
    const client = this.client as unknown as CallbackClient
    return this.#underDeadline(socket, (settle) => {
      const results = new Array<QueryResult<unknown>>(statements.length)
      let failure: { index: number; error: Error } | undefined
      let waiting = statements.length
      const answered = (index: number, error: unknown, result?: QueryResult<unknown>) => {
        if (error) {
          this.#failed(error)
          if (failure === undefined || index < failure.index) failure = { index, error: error as Error }
        } else results[index] = result as QueryResult<unknown>
        if (--waiting > 0) return
        settle(failure?.error, results)
      }
      inOneWrite(socket, () =>
        statements.forEach((statement, index) => {
          try {
            client.query(statement, (error, result) => answered(index, error, result))
          } catch (error) {
            answered(index, error)
          }
        }),
      )
    })
  }

  /**
   * `flight`'s transaction: BEGIN's commands, `statements` and COMMIT, as one query with a single
   * Sync where the connection takes it (one-sync.ts), else through `sendWhole`. Resolves to the
   * statements' results. A failure left the transaction aborted (the server skipped its COMMIT):
   * it is rolled back here, on a connection still whole, before the failure is thrown.
   */
  async sendTransaction(begin: readonly string[], statements: readonly QueryConfig[]): Promise<Array<QueryResult<unknown>>> {
    const commands = [...begin.map((text) => ({ text })), ...statements, { text: 'COMMIT' }]
    const whole = this.#inOneSync(commands)
    if (whole === undefined) return (await this.sendWhole([begin.join('; '), ...statements, 'COMMIT'])).slice(1, -1)
    try {
      return (await whole).slice(begin.length, -1)
    } catch (error) {
      if (this.broken === undefined) await this.#rollBack()
      throw error
    }
  }

  /**
   * `transactionInTwoFlights`' transaction: BEGIN with `first`, then `next`'s statement (if any)
   * with COMMIT, each pair one query with a single Sync where the connection takes it, else sent
   * one after another. Any failure is rolled back here, on a connection still whole, and thrown.
   */
  async sendInTwoFlights<R>(first: QueryConfig, next: (result: QueryResult<R>) => QueryConfig | undefined): Promise<[QueryResult<R>, QueryResult<R> | undefined]> {
    try {
      const opening = this.#inOneSync([{ text: 'BEGIN' }, first])
      const firstResult = (opening === undefined ? await this.#oneByOne([{ text: 'BEGIN' }, first]) : await opening)[1] as QueryResult<R>
      const second = next(firstResult)
      const closing = second === undefined ? [{ text: 'COMMIT' }] : [second, { text: 'COMMIT' }]
      const results = await (this.#inOneSync(closing) ?? this.#oneByOne(closing))
      return [firstResult, second === undefined ? undefined : (results[0] as QueryResult<R>)]
    } catch (error) {
      if (this.broken === undefined) await this.#rollBack()
      throw error
    }
  }

  /**
   * The store's transaction on a connection that does not pipeline (issue 21): BEGIN's commands
   * are held back and leave with `work`'s first statement, as one query with a single Sync where
   * the connection takes it (one-sync.ts), so opening the transaction costs no round trip of its
   * own; where it cannot, BEGIN goes first, as before. A `work` that sent nothing opened nothing:
   * no COMMIT, no ROLLBACK. Any failure is rolled back, on a connection still whole, and thrown.
   */
  async inTransactionOpenedByFirst<T>(begin: Begin, work: (tx: Queryable) => Promise<T>): Promise<T> {
    this.#opening = begin
    try {
      const result = await asOpenTransaction(this.tx, () => work(this.tx))
      if (this.#opened && !this.committed) await this.query({ text: 'COMMIT' })
      return result
    } catch (error) {
      if (this.#opened && this.broken === undefined) await this.#rollBack()
      throw error
    } finally {
      this.#opening = undefined
    }
  }

  /** BEGIN when it is still held back: the statement asking leaves with it. */
  #takeOpening(): Begin | undefined {
    const opening = this.#opening
    if (opening === undefined) return undefined
    this.#opening = undefined
    this.#opened = true
    return opening
  }

  /**
   * `config` with BEGIN's commands held back before it (`opening`) and the COMMIT after it
   * (`commit`), as one query with a single Sync, resolving to `config`'s result; undefined, with
   * nothing sent, when there is nothing to send with it, when the connection cannot take them so,
   * or when `config` asks for more than a plain statement (its own read timeout, another row
   * mode): then node-postgres sends them its own way, BEGIN alone first, the COMMIT later.
   */
  #sentWhole<R>(opening: Begin | undefined, config: QueryConfig, commit: boolean): Promise<QueryResult<R>> | undefined {
    if ((opening === undefined && !commit) || !isPlainStatement(config)) return undefined
    const before = opening === undefined ? [] : opening.commands.map((text) => ({ text }))
    const whole = this.#inOneSync(commit ? [...before, config, { text: 'COMMIT' }] : [...before, config])
    if (whole === undefined) return undefined
    this.committed ||= commit
    return whole.then((results) => results[before.length] as QueryResult<R>)
  }

  /** `commands` one after another, each once the one before has answered: the first failure stops them. */
  async #oneByOne(commands: readonly QueryConfig[]): Promise<Array<QueryResult<unknown>>> {
    const results: Array<QueryResult<unknown>> = []
    for (const command of commands) results.push(await this.query<unknown>(command))
    return results
  }

  /**
   * `commands` as one query with a single Sync (one-sync.ts), under the store's deadline when it
   * has one, resolving to their results; undefined, with nothing sent, where this connection
   * cannot take them that way.
   */
  #inOneSync(commands: readonly QueryConfig[]): Promise<Array<QueryResult<unknown>>> | undefined {
    const socket = this.socket
    const send = socket === undefined ? undefined : oneSyncSender(this.client, commands)
    if (socket === undefined || send === undefined) return undefined
    return this.#underDeadline<Array<QueryResult<unknown>>>(socket, (settle) =>
      send((error, answered) => settle(error === undefined ? undefined : (this.#failed(error) as Error), answered ?? [])),
    )
  }

  async #rollBack(): Promise<void> {
    try {
      await this.query({ text: 'ROLLBACK' })
    } catch (error) {
      this.broken ??= error
    }
  }

  /**
   * Runs `send`, which sends on this connection and calls `settle` once with the outcome, under
   * one deadline for the whole (the store's timeout): at it, the connection is given up (its
   * socket destroyed, so whatever was sent fails with it) and the deadline is the failure thrown.
   */
  #underDeadline<T>(socket: CorkableSocket, send: (settle: (error: Error | undefined, value: T) => void) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let gaveUp: Error | undefined
      const timeoutMs = this.#timeoutMs
      const deadline =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              gaveUp = new Error(`PostgreSQL did not answer within ${timeoutMs} ms`)
              this.broken ??= gaveUp
              socket.destroy()
            }, timeoutMs)
      const settle = (error: Error | undefined, value: T) => {
        clearTimeout(deadline)
        // Given up on, every statement failed with the destroyed connection: the deadline is the cause.
        if (error === undefined) resolve(value)
        else reject(gaveUp ?? error)
      }
      try {
        send(settle)
      } catch (error) {
        // Thrown before an answer could come: the deadline must not outlive it.
        clearTimeout(deadline)
        reject(error instanceof Error ? error : new Error(String(error)))
      }
    })
  }

  async #queryEach(statements: ReadonlyArray<QueryConfig | string>): Promise<Array<QueryResult<unknown>>> {
    const answers = await Promise.allSettled(statements.map((statement) => this.query<unknown>(typeof statement === 'string' ? { text: statement } : statement)))
    const failed = answers.find((answer) => answer.status === 'rejected')
    if (failed !== undefined) throw failed.reason
    return answers.map((answer) => (answer as PromiseFulfilledResult<QueryResult<unknown>>).value)
  }

  /**
   * Hands the next held statement over before the answer reaches its caller: from node-postgres's
   * own callback it leaves at once, as it would have from the driver's queue, not a turn of the
   * event loop's microtasks later (measured: a plain connection's flight took a quarter longer that way).
   */
  #answered(answer: () => void): void {
    this.#next()
    answer()
  }

  #next(): void {
    const turn = this.#waiting.shift()
    this.#busy = turn !== undefined
    turn?.()
  }

  #withTimeout(config: QueryConfig): QueryConfig {
    return this.#timeoutMs === undefined || config.query_timeout !== undefined ? config : { ...config, query_timeout: this.#timeoutMs }
  }

  #failed(error: unknown): unknown {
    // A failure without a SQLSTATE breaks the connection.
    if (sqlState(error) === undefined) this.broken ??= error
    return error
  }

  #sendThen<R>(config: QueryConfig, done: (error: Error | undefined, result?: QueryResult<R>) => void): void {
    if (this.socket === undefined) {
      this.client.query<R>(this.#withTimeout(config)).then((result) => done(undefined, result), (error: unknown) => done(this.#failed(error) as Error))
      return
    }
    const client = this.client as unknown as CallbackClient<R>
    try {
      // node-postgres calls back with null on success and an Error on failure.
      client.query(this.#withTimeout(config), (error, result) => (error ? done(this.#failed(error) as Error) : done(undefined, result)))
    } catch (error) {
      done(this.#failed(error) as Error)
    }
  }

  giveBack(): void {
    const { broken } = this
    this.client.release(broken === undefined ? undefined : broken instanceof Error ? broken : new Error('connection broken'))
    // A broken connection is being destroyed and may still report errors: it keeps the listener.
    if (broken === undefined) (this.client as Partial<Pick<NodeJS.EventEmitter, 'off'>>).off?.('error', this.#onError)
  }
}

/** The parts of a statement a single-Sync query sends as node-postgres would: nothing else may be asked. */
const PLAIN_STATEMENT_PARTS = new Set(['text', 'values', 'name'])

/** A statement object of `text`, `values` and `name` alone (not a node-postgres `Query`, no read timeout of its own). */
function isPlainStatement(config: QueryConfig): boolean {
  if (typeof config !== 'object' || config === null || Object.getPrototypeOf(config) !== Object.prototype) return false
  for (const part in config) if (!PLAIN_STATEMENT_PARTS.has(part)) return false
  return typeof config.text === 'string'
}

/** A node-postgres client as its callback form takes a statement: null or an Error, then the result. */
interface CallbackClient<R = unknown> {
  query(config: QueryConfig | string, callback: (error: Error | null, result: QueryResult<R>) => void): void
}

/** A Node socket as the runner uses it. */
interface CorkableSocket {
  cork(): void
  uncork(): void
  destroy(): void
}

/** The socket under a node-postgres client (`client.connection.stream`), when it can be corked. */
function socketOf(client: unknown): CorkableSocket | undefined {
  const stream = (client as { connection?: { stream?: { cork?: unknown } } } | null)?.connection?.stream
  // A stream that corks is a Node Writable, which uncorks and is destroyed too.
  return typeof stream?.cork === 'function' ? (stream as CorkableSocket) : undefined
}

/**
 * Runs `send`, which queues statements on the client of `socket` synchronously, with the socket
 * corked, so a pipelining connection writes the whole flight in one system call instead of one
 * per statement (node-postgres corks each statement's messages on its own; corks nest, issue 21).
 */
function inOneWrite<T>(socket: CorkableSocket, send: () => T): T {
  socket.cork()
  try {
    return send()
  } finally {
    socket.uncork()
  }
}

/** A connection of `pool`; within `timeoutMs` when given, a failure to connect then classified. */
async function checkOut(pool: PoolLike, timeoutMs: number | undefined): Promise<PoolClientLike> {
  if (timeoutMs === undefined) return pool.connect()
  try {
    return await withDeadline(pool.connect(), timeoutMs, () => `PostgreSQL did not hand over a connection within ${timeoutMs} ms`, (late) => late.release())
  } catch (error) {
    // An error with a SQLSTATE (too many connections, a refused login) is the server's answer and
    // stays as it is; one without is the connection failing (`classified`).
    throw classified(error, 'a connection')
  }
}
