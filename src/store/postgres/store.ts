import { createHash } from 'node:crypto'
import { OncelyError } from '../../errors.js'
import { describeKind, invalid, invalidHidden, positiveInteger } from '../../option-validation.js'
import type { CarriedSteps, ClaimRequest, Fence, IdempotencyStore, ReclaimInput, SeenClaim, StoreCompletion, TakeOverInput, WatchedClaim } from '../../engine/store.js'
import type { ClaimAttempt, ClaimSnapshot, ClaimState, WriteStatement } from '../../engine/types.js'
import { toQueryConfig, type PoolLike, type Queryable } from './executor.js'
import { claimOf, keyRowFromJson, newClaimOf, snapshotOf } from './key-rows.js'
import { isTransientPgError } from './pg-errors.js'
import { DEFAULT_SCHEMA, quoteSchema } from './schema-name.js'
import { ClaimWatcher } from './claim-watcher.js'
import { beginOf, bind, lastStatementOf, send, transaction } from './statement-runner.js'
import { batchedWrites, completionValues, fenceHeld } from './batched-writes.js'
import { buildStatements, type HeldRow, type KeyRow, type Statement } from './statements.js'

export interface PostgresStoreOptions {
  /** The pool the store runs on: `pg`'s Pool, or anything with `query` and `connect`. */
  pool: PoolLike
  /** Schema holding oncely's tables; any name of up to 63 bytes in UTF-8, spaces and capitals included. (Default: `oncely`) */
  schema?: string
  /**
   * Prepare hot statements once per connection. Turn off behind PgBouncer in transaction
   * mode, where a prepared statement may not exist on the next server connection. (Default: true)
   */
  preparedStatements?: boolean
  /**
   * How long the store waits for any one of its statements (a connection included) before it
   * gives up with `ONCELY_STORE_UNAVAILABLE`, which the engine retries within its limits; also
   * the `statement_timeout` of the store's own transactions. Not applied inside a transaction you
   * pass as `tx`: that one runs under your settings. (Default: 5000)
   */
  statementTimeoutMs?: number
  /**
   * How long a claim, take-over or reclaim may wait for a lock (a table locked by a migration, a
   * row held by a long transaction): past it the statement writes nothing, so a request given up
   * on never leaves a claim behind. Also the `lock_timeout` of the store's own transactions.
   * Must be below `statementTimeoutMs`. (Default: 2000)
   */
  lockTimeoutMs?: number
  /**
   * Wake duplicates waiting for a claim in flight (`waitMs`) by LISTEN/NOTIFY when it ends, instead
   * of by their next read alone: `true` listens on one connection of `pool`, opened while someone
   * waits; a pool listens on one of its connections instead (one reaching PostgreSQL past
   * PgBouncer, say); `false` never listens, and waiters poll. Turn it off, or give a direct pool,
   * behind PgBouncer in transaction mode, which does not carry LISTEN. The connection is one of
   * the pool's while someone waits, so a `pg.Pool` of `max: 1` never listens. (Default: true)
   */
  listen?: boolean | PoolLike
  /**
   * The most claims, or completions, one statement carries. A claim leaves at once when no other
   * is in flight; the claims that arrive meanwhile leave together when it answers, in one
   * statement, one round trip and one commit, each still decided by the key's unique index
   * (Invariant 1). Completions on the pool (not inside your transaction, nor a flight with your
   * writes), step commits and at-most-once step marks are batched the same way, each fenced by
   * its own token (Invariant 3); one whose body, or step result, is over 16 KiB is sent alone.
   * Flights (`complete(response, { statements })`) that arrive while one is in flight leave
   * together as one transaction, at most this many (one whose body is over 16 KiB goes alone);
   * when PostgreSQL refuses a statement of one of them (a lost fence, a write it rejects, a lock
   * timeout), each is sent again alone, so only that one fails, and a write that waits on a lock
   * holds up those batched with it until `lockTimeoutMs`. A lone request waits for nothing; under
   * load the database commits once per batch, not once per request. 1 sends each on its own; at
   * most 1000. (Default: 64)
   */
  maxBatchSize?: number
}

/** The PostgreSQL store, with the statements it runs exposed for operations tooling. */
export interface PostgresStore extends IdempotencyStore<Queryable> {
  readonly schema: string
  /** Deletes up to `batchSize` expired completed or failed keys; resolves to how many it deleted. */
  sweepExpired(batchSize: number): Promise<number>
  /** Counts `in_progress` claims whose lease is older than `staleAfterMs`. */
  countStaleClaims(staleAfterMs: number): Promise<number>
  /** Counts `in_progress` claims created more than `ageMs` ago, their lease fresh or not. */
  countClaimsOlderThan(ageMs: number): Promise<number>
  /** LISTEN connections made so far for waiting duplicates, reconnects included. */
  readonly listenConnections: number
}

export const DEFAULT_STATEMENT_TIMEOUT_MS = 5000
export const DEFAULT_LOCK_TIMEOUT_MS = 2000
export const DEFAULT_BATCH_SIZE = 64
/** A batch travels as one JSON parameter: past this many, one statement holds up too many requests. */
const MAX_BATCH_SIZE = 1000
const CLAIM_ATTEMPTS = 5

/**
 * The engine's store on PostgreSQL: single statements, every one in `statements.ts`; the
 * decisions are the engine's.
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { createPostgresStore, migrate } from 'oncely/postgres'
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * await migrate({ pool })
 * const store = createPostgresStore({ pool })
 * ```
 */
export function createPostgresStore(options: PostgresStoreOptions): PostgresStore {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object { pool, schema? }', options)
  if (typeof options.pool?.query !== 'function' || typeof options.pool.connect !== 'function') {
    // Described, not shown: a pool's configuration holds the database's password.
    throw invalidHidden('pool', 'must have query() and connect(), like pg.Pool', describeKind(options.pool))
  }
  const schema = options.schema ?? DEFAULT_SCHEMA
  const quoted = quoteSchema(schema)
  const timeoutMs = positiveInteger('statementTimeoutMs', options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS)
  const lockTimeoutMs = positiveInteger('lockTimeoutMs', options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS)
  if (lockTimeoutMs >= timeoutMs) throw invalid('lockTimeoutMs', `must be below statementTimeoutMs (${timeoutMs})`, lockTimeoutMs)
  const schemaHash = createHash('sha256').update(quoted).digest('hex').slice(0, 8)
  const prefix = options.preparedStatements === false ? undefined : `oncely_${schemaHash}`
  // One channel per schema: two stores on one database wake only their own waiters.
  const channel = `oncely_keys_${schemaHash}`
  const maxBatchSize = options.maxBatchSize ?? DEFAULT_BATCH_SIZE
  if (!Number.isSafeInteger(maxBatchSize) || maxBatchSize < 1 || maxBatchSize > MAX_BATCH_SIZE) {
    throw invalid('maxBatchSize', `must be an integer from 1 to ${MAX_BATCH_SIZE}`, maxBatchSize)
  }
  const sql = buildStatements(quoted, prefix)
  const begin = beginOf(sql.begin(timeoutMs, lockTimeoutMs))
  const pool = options.pool
  const listen = options.listen ?? true
  if (typeof listen !== 'boolean' && (typeof listen.query !== 'function' || typeof listen.connect !== 'function')) {
    throw invalidHidden('listen', 'must be a boolean, or a pool with query() and connect(), like pg.Pool', describeKind(listen))
  }

  const run = <R>(db: Queryable, statement: Statement, values: unknown[]) =>
    // The caller's own transaction keeps its own settings: no client-side timeout there.
    send<R>(db, bind(statement, values, db === pool ? timeoutMs : undefined), timeoutMs, statement.name ?? 'a statement')
  const fenced = async (db: Queryable, statement: Statement, fence: Fence, rest: unknown[]) => {
    const result = await run(db, statement, [fence.scope, fence.key, fence.fenceToken, ...rest])
    return (result.rowCount ?? 0) === 1
  }
  const held = async (scope: string, key: string, statement: Statement, values: unknown[]): Promise<ClaimState | null> => {
    const { rows } = await run<HeldRow>(pool, statement, values)
    return rows[0] ? claimOf(scope, key, rows[0]) : null
  }
  const writes = batchedWrites({ pool, sql, timeoutMs, lockTimeoutMs, channel, maxBatchSize, begin: begin.commands })
  // A pool of one connection cannot lend it to LISTEN: its waiters could then never read.
  const watcher =
    listen === false || (listen === true && poolSize(pool) < 2)
      ? undefined
      : new ClaimWatcher(listen === true ? pool : listen, channel, async (claim) => {
          const { rows } = await run<{ marked: boolean }>(pool, sql.awaitClaim, [claim.scope, claim.key, claim.claimId])
          return rows[0]?.marked === true
        })

  return Object.freeze({
    schema,
    get listenConnections() {
      return watcher?.connections ?? 0
    },
    /**
     * One round trip decides (Invariant 1). A second happens only when the insert lost a race to
     * a row committed after the statement's snapshot (then neither branch sees a row).
     */
    async claim(request: ClaimRequest): Promise<ClaimAttempt> {
      const { scope, key } = request
      for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
        const { row, sentAt } = await writes.claim(request)
        if (row?.outcome === 'claimed') return { kind: 'inserted', claim: newClaimOf(scope, key, request.claimId, request.fenceToken) }
        if (row) return { kind: 'existing', snapshot: snapshotOf(scope, key, keyRowFromJson(row.snapshot)) }
        if (performance.now() - sentAt >= lockTimeoutMs) {
          throw new OncelyError('ONCELY_STORE_UNAVAILABLE', `the claim of key ${JSON.stringify(key)} waited longer than lockTimeoutMs (${lockTimeoutMs}) for a lock`)
        }
      }
      throw new OncelyError('ONCELY_STORE_UNEXPECTED', `claim of key ${JSON.stringify(key)} found no row after ${CLAIM_ATTEMPTS} attempts`)
    },
    async read(scope: string, key: string): Promise<ClaimSnapshot | null> {
      const { rows } = await run<KeyRow>(pool, sql.readKey, [scope, key])
      return rows[0] ? snapshotOf(scope, key, rows[0]) : null
    },
    async takeOver(seen: SeenClaim, take: TakeOverInput): Promise<ClaimState | null> {
      const values = [seen.scope, seen.key, seen.claimId, seen.fenceToken, take.staleAfterMs, take.fenceToken, take.ttlMs, lockTimeoutMs]
      return held(seen.scope, seen.key, sql.takeOver, values)
    },
    async reclaimExpired(seen: SeenClaim, request: ReclaimInput): Promise<ClaimState | null> {
      const values = [seen.scope, seen.key, seen.claimId, request.fingerprint, request.ttlMs, request.claimId, request.fenceToken, lockTimeoutMs, request.staleAfterMs ?? null]
      return held(seen.scope, seen.key, sql.reclaimExpired, values)
    },
    async commitStep(fence: Fence, step: string, result: unknown, carried?: CarriedSteps) {
      return writes.commitStep(fence, step, JSON.stringify(result ?? null), JSON.stringify(carried?.stepResults ?? {}))
    },
    async markStepStarted(fence: Fence, step: string, carried?: CarriedSteps) {
      return writes.markStepStarted(fence, step, JSON.stringify(carried?.stepResults ?? {}), carried?.recoveryPoint ?? null)
    },
    async renewLease(fence: Fence, ttlMs: number) {
      return fenced(pool, sql.renewLease, fence, [ttlMs])
    },
    async complete(fence: Fence, completion: StoreCompletion<Queryable>) {
      const { statements, tx } = completion
      // `completeInFlight`'s values: the completion that fails in the database on a lost fence.
      const inFlight = () => [fence.scope, fence.key, fence.fenceToken, ...completionValues(completion), channel]
      if (statements !== undefined) {
        // The completion is the flight's first statement: when it failed, its error is the one thrown.
        return writes.completeInFlight([bind(sql.completeInFlight, inFlight()), ...statements], completion)
      }
      if (tx === undefined) return writes.complete(fence, completion)
      // The last statement of the store's own transaction leaves with its COMMIT: the fence is
      // then checked in the database (completeInFlight), since nothing waits for its row count.
      const last = completion.commit === true ? lastStatementOf(tx) : undefined
      if (last !== undefined) return fenceHeld(run(last, sql.completeInFlight, inFlight()))
      return fenced(tx, sql.complete, fence, [...completionValues(completion), channel])
    },
    async transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T> {
      return transaction(pool, begin, timeoutMs, work)
    },
    async runStatement(tx: Queryable, statement: WriteStatement): Promise<void> {
      await tx.query(toQueryConfig(statement))
    },
    ...(watcher === undefined ? {} : { watchClaim: (claim: WatchedClaim, wake: () => void) => watcher.watch(claim, wake) }),
    async release(fence: Fence) {
      return fenced(pool, sql.release, fence, [channel])
    },
    async suspend(fence: Fence, outcomeError?: string) {
      return fenced(pool, sql.suspend, fence, [outcomeError ?? null, channel])
    },
    isTransientError(error: unknown): boolean {
      return (error instanceof OncelyError && error.code === 'ONCELY_STORE_UNAVAILABLE') || isTransientPgError(error)
    },
    async sweepExpired(batchSize: number) {
      const result = await run(pool, sql.sweepExpired, [batchSize])
      return result.rowCount ?? 0
    },
    async countStaleClaims(staleAfterMs: number) {
      const result = await run<{ count: number }>(pool, sql.countStaleClaims, [staleAfterMs])
      return result.rows[0]?.count ?? 0
    },
    async countClaimsOlderThan(ageMs: number) {
      const result = await run<{ count: number }>(pool, sql.countClaimsOlderThan, [ageMs])
      return result.rows[0]?.count ?? 0
    },
  })
}

/** A `pg.Pool`'s `max`, or Infinity for a pool that does not say. */
function poolSize(pool: PoolLike): number {
  const max = (pool as { options?: { max?: unknown } }).options?.max
  return typeof max === 'number' ? max : Number.POSITIVE_INFINITY
}
