import { describeKind, describeValue, invalidHidden } from '../option-validation.js'
import { quoteIdentifier } from '../store/postgres/quote-identifier.js'
import { buildClientKeyStatements, type ClientKeyRow } from '../store/postgres/statements-client-keys.js'
import type { KeyStore, OperationOutcome, OperationRecord } from './key-store.js'

/**
 * The one method the PostgreSQL key store calls: `pg`'s Pool, PoolClient and Client fit as they
 * are (the same shape as the server store's `Queryable`).
 */
export interface KeyStoreQueryable {
  query<R = Record<string, unknown>>(config: { text: string; values?: unknown[]; name?: string }): Promise<{ rows: R[]; rowCount: number | null }>
  /**
   * `pg`'s Client and PoolClient report the transaction status of their last answer: `'I'`
   * idle, `'T'` in a transaction block, `'E'` in a failed one. The store refuses to write
   * through a connection that is not idle.
   */
  getTransactionStatus?(): string | null
}

export interface PostgresKeyStoreOptions {
  /** Schema of the key table; it must exist. (Default: `public`) */
  readonly schema?: string
  /** Name of the key table. (Default: `oncely_client_keys`) */
  readonly table?: string
}

/** A key store in PostgreSQL, for clients that already have a database. */
export interface PostgresKeyStore extends KeyStore {
  /** Creates the key table and its index if they are missing; safe to run from several processes at once. */
  setup(): Promise<void>
  /** The SQL `setup` runs, for a migration tool of your own. */
  readonly setupSql: string
}

const PRUNE_BATCH = 500
/** PostgreSQL keeps the first 63 bytes of a name (NAMEDATALEN - 1) and cuts the rest, silently. */
const MAX_NAME_BYTES = 63
const INDEX_SUFFIX = '_expires_at'

/**
 * A key store in a PostgreSQL table, shared by every process that uses the database. A claim is
 * one `INSERT … ON CONFLICT DO NOTHING RETURNING` (committed on its own) and, when another
 * process got there first, a read of its row. Values are always bound parameters.
 *
 * Give it a pool (or a connection of its own), never a connection inside your open transaction:
 * a rollback there would delete a key that was already sent, and the next call would mint a new
 * one. A `pg` Client or PoolClient inside a transaction block is refused
 * (`ONCELY_INVALID_OPTION`, seen through its `getTransactionStatus()`); other drivers cannot be
 * checked.
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { createClient, postgresKeyStore } from 'oncely/client'
 * const keyStore = postgresKeyStore(new pg.Pool({ connectionString: process.env.DATABASE_URL }))
 * await keyStore.setup()
 * const client = createClient({ baseUrl: 'http://127.0.0.1:3000', keyStore })
 * ```
 */
export function postgresKeyStore(db: KeyStoreQueryable, options: PostgresKeyStoreOptions = {}): PostgresKeyStore {
  if (typeof db?.query !== 'function') throw invalidHidden('db', 'must have a query(config) method, such as a pg.Pool', describeKind(db))
  refuseOpenTransaction(db)
  const schema = options.schema ?? 'public'
  const table = options.table ?? 'oncely_client_keys'
  refuseLongName('schema', schema, MAX_NAME_BYTES, '')
  refuseLongName('table', table, MAX_NAME_BYTES - INDEX_SUFFIX.length, `, and the key store's index is named TABLE${INDEX_SUFFIX}`)
  const sql = buildClientKeyStatements(quoteIdentifier('schema', schema), quoteIdentifier('table', table), quoteIdentifier('table', table + INDEX_SUFFIX))

  return Object.freeze({
    setupSql: sql.setup,
    async setup() {
      await db.query({ text: sql.setupTakingTurns })
    },
    async claim(candidate: OperationRecord) {
      refuseOpenTransaction(db)
      const inserted = await db.query<ClientKeyRow>({
        text: sql.insert,
        values: [candidate.operationId, candidate.key, candidate.fingerprint, candidate.createdAt, candidate.finishedAt, candidate.finalStatus, candidate.expiresAt],
      })
      const row = inserted.rows[0] ?? (await db.query<ClientKeyRow>({ text: sql.select, values: [candidate.operationId] })).rows[0]
      if (!row) throw new Error(`key store row for operation ${JSON.stringify(candidate.operationId)} vanished while claiming it`)
      return toRecord(row)
    },
    async finish(operationId: string, outcome: OperationOutcome) {
      refuseOpenTransaction(db)
      await db.query({ text: sql.finish, values: [operationId, outcome.finishedAt, outcome.finalStatus, outcome.expiresAt] })
    },
    async prune(now = new Date()) {
      refuseOpenTransaction(db)
      let pruned = 0
      for (;;) {
        const deleted = (await db.query({ text: sql.prune, values: [now, PRUNE_BATCH] })).rowCount ?? 0
        pruned += deleted
        if (deleted < PRUNE_BATCH) return pruned
      }
    },
  })
}

/**
 * A name PostgreSQL would cut is refused: two long names with one 63-byte prefix would be one
 * table, and a table of 53 to 63 bytes would have an index named like no table of its own. The
 * limit is in bytes (UTF-8), so a non-ASCII name reaches it at fewer characters.
 */
function refuseLongName(option: string, name: unknown, maxBytes: number, why: string): void {
  if (typeof name !== 'string') return
  const bytes = Buffer.byteLength(name, 'utf8')
  if (bytes <= maxBytes) return
  throw invalidHidden(option, `must be at most ${maxBytes} bytes in UTF-8 (PostgreSQL keeps ${MAX_NAME_BYTES} bytes of a name${why})`, `${describeValue(name)} (${bytes} bytes)`)
}

/**
 * A key written inside the caller's transaction is undone by its rollback, after the request
 * carrying it was sent: the next call would mint a second key for one operation.
 */
function refuseOpenTransaction(db: KeyStoreQueryable): void {
  const status = typeof db.getTransactionStatus === 'function' ? db.getTransactionStatus() : null
  if (status === 'T' || status === 'E') {
    throw invalidHidden(
      'db',
      'must be a pg.Pool or a connection of its own, never one inside an open transaction (a rollback would delete a key already sent)',
      `a connection inside an open transaction (transaction status '${status}')`,
    )
  }
}

function toRecord(row: ClientKeyRow): OperationRecord {
  return {
    operationId: row.operation_id,
    key: row.idempotency_key,
    fingerprint: row.fingerprint,
    createdAt: new Date(row.created_at),
    finishedAt: row.finished_at === null ? null : new Date(row.finished_at),
    finalStatus: row.final_status,
    expiresAt: row.expires_at === null ? null : new Date(row.expires_at),
  }
}
