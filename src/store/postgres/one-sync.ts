/**
 * A transaction sent as one node-postgres query that ends in a single Sync (issue 21).
 *
 * node-postgres ends every statement with a Sync, and PostgreSQL answers each Sync with
 * ReadyForQuery and a flush of its own: a flight of BEGIN, two SET LOCALs, three writes and
 * COMMIT is five sends from the server and as many reads here, and on a connection that does not
 * pipeline, five round trips. Sent as Parse/Bind/Execute for every command and one Sync after the
 * last, the server answers the whole transaction in one flush, and a plain connection waits for
 * one round trip, like a pipelining one. Measured through `writeInOneFlight` (three inserts; eight
 * connections, sixteen callers, loopback, 2-core machine; three rounds of each): on a plain pool
 * 2 058–2 550 → 4 915–5 441 transactions a second, 0.24–0.37 → 0.09–0.12 ms of this process's CPU
 * and 0.35–0.41 → 0.19–0.21 ms of PostgreSQL's each; on a pipelining pool 4 595–4 698 → 4 935–5 610,
 * 0.107–0.121 → 0.086–0.104 and 0.225–0.230 → 0.193–0.197 ms.
 *
 * After a failure the server skips every message up to the Sync, the COMMIT too: the transaction
 * is left aborted, and the caller rolls it back.
 */
import { createRequire } from 'node:module'
import pg from 'pg'
import type { QueryConfig, QueryResult } from './executor.js'

/** node-postgres's own conversion of a JavaScript value to a parameter (dates, buffers, arrays, JSON). */
const { prepareValue } = createRequire(import.meta.url)('pg/lib/utils.js') as { prepareValue(this: void, value: unknown): unknown }

/** The protocol writers and prepared-statement record of a node-postgres connection (`client.connection`). */
interface ProtocolConnection {
  parse(query: { text: string; name: string }): void
  bind(config: { portal: string; statement: string; values: unknown[] }): void
  describe(message: { type: 'P'; name: string }): void
  execute(config: { portal: string; rows: number }): void
  sync(): void
  sendCopyFail(message: string): void
  parsedStatements: Record<string, string | undefined>
  stream: { cork(): void; uncork(): void }
}

/**
 * node-postgres's `Query`, as a base class: a pipelining client sends only its instances. Typed
 * bare, since @types/pg declares its handlers as properties this class overrides with methods.
 */
const QueryBase = pg.Query as unknown as new (config: { text: string }) => object

interface ProtocolClient {
  connection: ProtocolConnection
  query(query: OneSyncQuery): void
  getTypeParser(oid: number, format: string): (value: string) => unknown
}

interface FieldDescription {
  name: string
  dataTypeID: number
  format?: string
}

export type OneSyncDone = (error: Error | undefined, results?: Array<QueryResult<unknown>>) => void

/**
 * A sender of `commands` on `client` as one query with a single Sync: called, it sends them and
 * calls `done` once, with their results in order or with the first failure (the server ran
 * nothing after it). Undefined when `client` cannot take them that way: not a node-postgres client
 * of this package's `pg`, or a named statement it has not prepared yet (node-postgres prepares it
 * on its own path, and records it as prepared only once the server said so: a Parse sent here
 * would leave that record wrong after a failure).
 */
export function oneSyncSender(client: unknown, commands: readonly QueryConfig[]): ((done: OneSyncDone) => void) | undefined {
  if (!(client instanceof pg.Client)) return undefined
  const protocol = client as unknown as ProtocolClient
  const { connection } = protocol
  if (typeof connection?.parse !== 'function' || typeof connection.stream?.cork !== 'function') return undefined
  for (const command of commands) {
    if (command.name !== undefined && connection.parsedStatements[command.name] !== command.text) return undefined
  }
  return (done) => protocol.query(new OneSyncQuery(commands, protocol, done))
}

/**
 * One query to node-postgres (a subclass of its `Query`, which a pipelining client requires),
 * holding several commands: it writes their messages and one Sync, and sorts the answers back
 * into one result per command.
 */
class OneSyncQuery extends QueryBase {
  /** node-postgres wraps it with its read timeout (`query_timeout`) before sending. */
  callback: (error: Error | null, results?: Array<QueryResult<unknown>>) => void
  readonly #commands: readonly QueryConfig[]
  readonly #results: Array<QueryResult<unknown>>
  readonly #typeParser: ProtocolClient['getTypeParser']
  #current = 0
  #fields: FieldDescription[] = []
  #parsers: Array<(value: string) => unknown> = []
  #rowFailure: Error | undefined
  #called = false

  constructor(commands: readonly QueryConfig[], client: ProtocolClient, done: OneSyncDone) {
    super({ text: '' })
    this.#commands = commands
    this.#results = commands.map(() => ({ rows: [], rowCount: null }))
    this.#typeParser = (oid, format) => client.getTypeParser(oid, format)
    this.callback = (error, results) => {
      // Once: a connection error after a statement's failure reports again.
      if (this.#called) return
      this.#called = true
      done(error ?? undefined, results)
    }
  }

  /**
   * Every value converted first, so a value `pg` cannot send (a cyclic object) fails the query
   * with nothing written: node-postgres then hands the error to `handleError`. Only then the
   * messages, corked into one write.
   */
  submit(connection: ProtocolConnection): Error | null {
    let values: unknown[][]
    try {
      values = this.#commands.map((command) => (command.values ?? []).map((value) => prepareValue(value)))
    } catch (error) {
      return error instanceof Error ? error : new Error(String(error))
    }
    connection.stream.cork()
    try {
      this.#commands.forEach((command, index) => {
        if (command.name === undefined) connection.parse({ text: command.text, name: '' })
        connection.bind({ portal: '', statement: command.name ?? '', values: values[index]! })
        connection.describe({ type: 'P', name: '' })
        connection.execute({ portal: '', rows: 0 })
      })
      connection.sync()
    } finally {
      connection.stream.uncork()
    }
    return null
  }

  handleRowDescription(message: { fields: FieldDescription[] }): void {
    this.#fields = message.fields
    this.#parsers = message.fields.map((field) => this.#typeParser(field.dataTypeID, field.format ?? 'text'))
  }

  handleDataRow(message: { fields: Array<string | null> }): void {
    if (this.#rowFailure !== undefined) return
    try {
      const row: Record<string, unknown> = {}
      message.fields.forEach((value, index) => {
        row[this.#fields[index]!.name] = value === null ? null : this.#parsers[index]!(value)
      })
      this.#results[this.#current]!.rows.push(row)
    } catch (error) {
      this.#rowFailure = error as Error
    }
  }

  handleCommandComplete(message: { text: string }): void {
    const counted = /^[A-Za-z]+(?: (\d+))?(?: (\d+))?/.exec(message.text)
    const count = counted?.[2] ?? counted?.[1]
    this.#results[this.#current]!.rowCount = count === undefined ? null : Number(count)
    this.#current++
  }

  /** An empty statement answers EmptyQueryResponse instead of CommandComplete. */
  handleEmptyQuery(): void {
    this.#current++
  }

  /** node-postgres hands the server's failure here and no ReadyForQuery after it. */
  handleError(error: Error): void {
    this.callback(error)
  }

  handleReadyForQuery(): void {
    if (this.#rowFailure !== undefined) this.callback(this.#rowFailure)
    else this.callback(null, this.#results)
  }

  handlePortalSuspended(): void {}

  /** COPY … FROM STDIN has no data here: refused, as node-postgres refuses it. */
  handleCopyInResponse(connection: ProtocolConnection): void {
    connection.sendCopyFail('No source stream defined')
  }

  handleCopyData(): void {}
}
