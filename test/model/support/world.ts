import pg from 'pg'
import { createPostgresStore, type PostgresStore } from '../../../src/store/postgres/index.js'
import type { TestDatabase } from '../../helpers/db.js'
import { createFakeProvider, type FakeProvider } from './fake-provider.js'
import { MODEL_TIMING, startWorker, type Worker } from './worker.js'

/** Most concurrent begins of one command, and so the number of worker slots. */
export const MAX_CONCURRENT = 8

/** The real system the commands drive: the test database, its workers, the provider. */
export class World {
  readonly db: TestDatabase
  readonly admin: pg.Client
  /** A store of its own, for the sweeper. */
  readonly sweeper: PostgresStore
  readonly table: string
  provider: FakeProvider = createFakeProvider()
  /** Faults that really happened, so a test can tell a fault from a command that found nothing to cut. */
  readonly faults = { answersCut: 0, ownersTerminated: 0 }
  readonly #workers: Worker[] = []
  readonly #prefix = `oncely_model_${process.pid}_`
  #nextWorker = 0

  private constructor(db: TestDatabase, admin: pg.Client) {
    this.db = db
    this.admin = admin
    this.sweeper = createPostgresStore({ pool: db.pool, schema: db.schema })
    this.table = `"${db.schema.replaceAll('"', '""')}".idempotency_key`
  }

  static async open(db: TestDatabase): Promise<World> {
    const admin = new pg.Client({ connectionString: db.url })
    await admin.connect()
    return new World(db, admin)
  }

  /** The live worker in `slot`, a new one when the last one there was killed. */
  async worker(slot: number): Promise<Worker> {
    let worker = this.#workers[slot]
    if (!worker?.alive) {
      worker = await startWorker(this.db, `${this.#prefix}${this.#nextWorker++}`)
      this.#workers[slot] = worker
    }
    return worker
  }

  /** Every backend of every worker terminated (pg_terminate_backend), as a failover does. */
  async terminateAll(): Promise<void> {
    await this.admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1', [`${this.#prefix}%`])
  }

  async terminate(worker: Worker): Promise<void> {
    await this.admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [worker.name])
    this.faults.ownersTerminated++
  }

  /** Resolves true once a backend of `worker` waits on a lock, false after `timeoutMs`. */
  async waitsOnLock(worker: Worker, timeoutMs = 5000): Promise<boolean> {
    const deadline = performance.now() + timeoutMs
    while (performance.now() < deadline) {
      const { rows } = await this.admin.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [
        worker.name,
      ])
      if ((rows[0]?.n ?? 0) > 0) return true
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
    return false
  }

  async row(scope: string, key: string): Promise<{ claim_id: string; status: string; suspended: boolean } | undefined> {
    const { rows } = await this.admin.query<{ claim_id: string; status: string; suspended: boolean }>(
      `SELECT claim_id::text, status, fence_token IS NULL AS suspended FROM ${this.table} WHERE scope = $1 AND key = $2`,
      [scope, key],
    )
    return rows[0]
  }

  /** Time passes for one row, in the database's clock: its lease (and, for `ttl`, its life) moves back. */
  async age(scope: string, key: string, past: 'stale' | 'ttl'): Promise<void> {
    const staleMs = MODEL_TIMING.staleAfterMs + MODEL_TIMING.leaseRenewMs + 1000
    if (past === 'stale') {
      await this.admin.query(`UPDATE ${this.table} SET locked_at = locked_at - $3::bigint * interval '1 millisecond' WHERE scope = $1 AND key = $2`, [scope, key, staleMs])
      return
    }
    const ttlMs = MODEL_TIMING.ttlMs + 1000
    await this.admin.query(
      `UPDATE ${this.table}
          SET created_at = created_at - $3::bigint * interval '1 millisecond',
              locked_at = locked_at - $3::bigint * interval '1 millisecond',
              expires_at = expires_at - $3::bigint * interval '1 millisecond'
        WHERE scope = $1 AND key = $2`,
      [scope, key, ttlMs],
    )
  }

  /** Deletes every row of this run's scopes: the executions still renewing them see their fence fail and stop. */
  async forget(scopePrefix: string): Promise<void> {
    await this.admin.query(`DELETE FROM ${this.table} WHERE scope LIKE $1`, [`${scopePrefix}%`])
  }

  async close(): Promise<void> {
    for (const worker of this.#workers) if (worker.alive) await worker.kill(this.admin)
    await this.admin.end()
  }
}
