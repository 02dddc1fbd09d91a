import { createHash } from 'node:crypto'
import { OncelyError } from '../../errors.js'
import type { ClaimTiming, Fence, FinalOutcome, IdempotencyStore } from '../../engine/store.js'
import type { ClaimResult, IdempotencyRequest, StoredResponse } from '../../engine/types.js'
import { withTransaction, type PoolLike, type Queryable } from './executor.js'
import { DEFAULT_SCHEMA, quoteSchema } from './schema-name.js'
import { buildStatements, type ClaimRow, type ReclaimRow, type Statement, type Statements, type TakeOverRow } from './statements.js'

export interface PostgresStoreOptions {
  /** The pool the store runs on: `pg`'s Pool, or anything with `query` and `connect`. */
  pool: PoolLike
  /** Schema holding oncely's tables; any name, spaces and capitals included. (Default: `oncely`) */
  schema?: string
  /**
   * Prepare hot statements once per connection. Turn off behind PgBouncer in transaction
   * mode, where a prepared statement may not exist on the next server connection. (Default: true)
   */
  preparedStatements?: boolean
}

/** The PostgreSQL store, with the statements it runs exposed for operations tooling. */
export interface PostgresStore extends IdempotencyStore<Queryable> {
  readonly schema: string
  /** Deletes up to `batchSize` expired keys; resolves to how many it deleted. */
  sweepExpired(batchSize: number): Promise<number>
  /** Counts `in_progress` claims whose lease is older than `staleAfterMs`. */
  countStaleClaims(staleAfterMs: number): Promise<number>
}

/**
 * The engine's store on PostgreSQL. Every statement lives in `statements.ts`.
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
  if (typeof options !== 'object' || options === null || typeof options.pool?.query !== 'function' || typeof options.pool.connect !== 'function') {
    throw new OncelyError('ONCELY_INVALID_OPTION', 'pool must have query() and connect(), like pg.Pool')
  }
  const schema = options.schema ?? DEFAULT_SCHEMA
  const quoted = quoteSchema(schema)
  const prefix = options.preparedStatements === false ? undefined : `oncely_${createHash('sha256').update(quoted).digest('hex').slice(0, 8)}`
  const sql = buildStatements(quoted, prefix)
  const pool = options.pool
  return Object.freeze({
    schema,
    claim: (request: IdempotencyRequest, timing: ClaimTiming) => claim(pool, sql, request, timing),
    async commitPhase(fence: Fence, phase: string, result: unknown) {
      return fenced(pool, sql.commitPhase, fence, [phase, JSON.stringify(result ?? null)])
    },
    async renewLease(fence: Fence, ttlMs: number) {
      return fenced(pool, sql.renewLease, fence, [ttlMs])
    },
    async complete(fence: Fence, outcome: FinalOutcome, tx?: Queryable) {
      return fenced(tx ?? pool, sql.complete, fence, completionValues(outcome))
    },
    async completeInTransaction<T>(fence: Fence, work: (tx: Queryable) => Promise<{ outcome: FinalOutcome; value: T }>) {
      return withTransaction(pool, async (tx) => {
        const { outcome, value } = await work(tx)
        if (!(await fenced(tx, sql.complete, fence, completionValues(outcome)))) {
          // Invariant 3: the business writes of a worker that lost its claim must not land.
          throw new LockLostSignal()
        }
        return { completed: true, value }
      }).catch((error: unknown) => {
        if (error instanceof LockLostSignal) return { completed: false, value: undefined as T }
        throw error
      })
    },
    async release(fence: Fence) {
      return fenced(pool, sql.release, fence, [])
    },
    async suspend(fence: Fence) {
      return fenced(pool, sql.suspend, fence, [])
    },
    async sweepExpired(batchSize: number) {
      const result = await pool.query(bind(sql.sweepExpired, [batchSize]))
      return result.rowCount ?? 0
    },
    async countStaleClaims(staleAfterMs: number) {
      const result = await pool.query<{ count: number }>(bind(sql.countStaleClaims, [staleAfterMs]))
      return result.rows[0]?.count ?? 0
    },
  })
}

/** Thrown inside the completion transaction to roll it back when the fence fails. */
class LockLostSignal extends Error {}

function bind(statement: Statement, values: unknown[]) {
  return statement.name === undefined ? { text: statement.text, values } : { name: statement.name, text: statement.text, values }
}

async function fenced(db: Queryable, statement: Statement, fence: Fence, rest: unknown[]): Promise<boolean> {
  const result = await db.query(bind(statement, [fence.scope, fence.key, fence.fenceToken, ...rest]))
  return (result.rowCount ?? 0) === 1
}

function completionValues(outcome: FinalOutcome): unknown[] {
  const { response } = outcome
  const body = Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength)
  return [outcome.status, response.status, JSON.stringify(response.headers), body]
}

/**
 * One round trip decides (Invariant 1). A second happens only to take over a stale claim, to
 * reclaim an expired key, or when the insert lost a race to a row committed after the
 * statement's snapshot (then neither branch of the statement sees a row).
 */
async function claim(pool: Queryable, sql: Statements, request: IdempotencyRequest, timing: ClaimTiming): Promise<ClaimResult> {
  const { scope, key, fingerprint } = request
  for (let attempt = 0; attempt < 5; attempt++) {
    const { rows } = await pool.query<ClaimRow>(bind(sql.claim, [scope, key, fingerprint, timing.ttlMs, timing.staleAfterMs]))
    const row = rows[0]
    if (!row) continue
    if (row.outcome === 'claimed') {
      return { kind: 'claimed', how: 'new', claim: { scope, key, claimId: row.claim_id, fenceToken: tokenOf(row.lock_token), recoveryPoint: null, phases: {} } }
    }
    if (row.expired) {
      const reclaimed = await pool.query<ReclaimRow>(bind(sql.reclaimExpired, [scope, key, fingerprint, timing.ttlMs]))
      const fresh = reclaimed.rows[0]
      if (fresh) {
        return { kind: 'claimed', how: 'reclaimed-expired', claim: { scope, key, claimId: fresh.claim_id, fenceToken: fresh.lock_token, recoveryPoint: null, phases: {} } }
      }
      continue
    }
    // Invariant 5: mismatch before replay, conflict or take-over.
    if (row.request_hash !== fingerprint) return { kind: 'mismatch' }
    if (row.status !== 'in_progress') return { kind: 'completed', fingerprint: row.request_hash, response: responseOf(row) }
    if (!row.stale) return { kind: 'in-progress', fingerprint: row.request_hash, retryAfterMs: row.stale_in_ms }
    const taken = await pool.query<TakeOverRow>(
      bind(sql.takeOver, [scope, key, row.claim_id, row.lock_token, fingerprint, timing.staleAfterMs]),
    )
    const won = taken.rows[0]
    if (!won) return { kind: 'in-progress', fingerprint: row.request_hash, retryAfterMs: 0 }
    return {
      kind: 'claimed',
      how: 'take-over',
      claim: { scope, key, claimId: row.claim_id, fenceToken: won.lock_token, recoveryPoint: won.recovery_point, phases: won.phase_data },
    }
  }
  throw new OncelyError('ONCELY_STORE_UNEXPECTED', `claim of key ${JSON.stringify(key)} found no row after 5 attempts`)
}

function tokenOf(token: string | null): string {
  if (token === null) throw new OncelyError('ONCELY_STORE_UNEXPECTED', 'a fresh claim came back without a fence token')
  return token
}

function responseOf(row: ClaimRow): StoredResponse {
  if (row.response_status === null || row.response_body === null) {
    throw new OncelyError('ONCELY_STORE_UNEXPECTED', `key in status ${row.status} has no stored response`)
  }
  return { status: row.response_status, headers: row.response_headers ?? [], body: row.response_body }
}
