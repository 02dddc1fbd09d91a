import pg from 'pg'
import { createEngine, type Engine } from '../../../src/index.js'
import { createPostgresStore, type PoolLike, type QueryResult, type Queryable } from '../../../src/store/postgres/index.js'
import type { TestDatabase } from '../../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js'

/** The engine's timing in the model: long thresholds, a fast lease, so aging is the model's (by SQL) and renewals are real. */
export const MODEL_TIMING = Object.freeze({ staleAfterMs: 30_000, ttlMs: 120_000, leaseRenewMs: 50 })

/**
 * One worker process of the model: an engine on its own pool of one connection, tagged with an
 * `application_name` so the test can terminate exactly its backends, and reaching the database
 * through a proxy of its own, so the test can cut an answer on its way back. `kill()` is the process
 * dying: its backends are terminated for real, and from then on it never reaches the database
 * again (a dead process sends nothing); its executions see their fenced writes fail and stop
 * renewing, as the memory of a dead process stops mattering.
 */
export interface Worker {
  readonly name: string
  readonly engine: Engine<Queryable>
  readonly alive: boolean
  readonly proxy: TcpProxy
  kill(admin: pg.Client): Promise<void>
}

const NOTHING: QueryResult<never> = { rows: [], rowCount: 0 }

export async function startWorker(db: TestDatabase, name: string): Promise<Worker> {
  const proxy = await startTcpProxy(db.url)
  const url = new URL(proxy.url)
  url.searchParams.set('application_name', name)
  const pool = new pg.Pool({ connectionString: url.toString(), max: 1 })
  // Terminated idle connections are the point of the model; the pool replaces them.
  pool.on('error', () => {})
  let alive = true
  const dead = <R>() => Promise.resolve(NOTHING as QueryResult<R>)
  const reachable: PoolLike = {
    query: <R>(config: Parameters<PoolLike['query']>[0]) => (alive ? pool.query(config) : dead<R>()) as Promise<QueryResult<R>>,
    async connect() {
      if (!alive) return { query: dead, release() {} }
      const client = await pool.connect()
      return {
        query: <R>(config: Parameters<PoolLike['query']>[0]) => (alive ? client.query(config) : dead<R>()) as Promise<QueryResult<R>>,
        release: (destroy?: boolean | Error) => client.release(destroy),
      }
    },
  }
  const store = createPostgresStore({ pool: reachable, schema: db.schema })
  const engine = createEngine({ store, ...MODEL_TIMING })
  return {
    name,
    engine,
    proxy,
    get alive() {
      return alive
    },
    async kill(admin) {
      alive = false
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [name])
      await pool.end().catch(() => {})
      await proxy.close()
    },
  }
}
