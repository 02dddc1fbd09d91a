import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { inject } from 'vitest'
import { migrate } from '../../src/store/postgres/migrate.js'
import { trackOpenHandle } from '../setup/guard-open-handles.js'
import { DEFAULT_FILE_CONNECTIONS, reserveConnections } from './connection-budget.js'

export interface TestDatabase {
  /** Connection string of this file's own database. */
  readonly url: string
  /** A pool on it (closed by `close`). */
  readonly pool: pg.Pool
  /** The schema oncely's tables live in. */
  readonly schema: string
  /** Opens another pool on the same database (with pg `settings` such as `pipeline`), closed by `close` too. */
  newPool(max?: number, settings?: pg.PoolConfig): pg.Pool
  close(): Promise<void>
}

let partitionsOfNewDatabases: number | undefined

/**
 * From now on in this test file, `createTestDatabase` migrates each database itself, with the key
 * table hash-partitioned into `partitions` (`migrate({ partitions })`), instead of cloning the
 * template: so a file that imports another runs that one's tests on a partitioned schema
 * (test/store/partitioned-engine.test.ts).
 */
export function partitionTestDatabases(partitions: number): void {
  partitionsOfNewDatabases = partitions
}

export interface TestDatabaseOptions {
  /** The size of `pool` (default 10). */
  max?: number
  /**
   * The most connections the file holds on the server at once: its pools, the processes it
   * starts and what they open (default 25). Reserved from the suite's budget before the
   * database is made, waiting until they fit (test/helpers/connection-budget.ts).
   */
  connections?: number
}

/**
 * A fresh database cloned from the migrated template: each test file gets its own, so files run
 * in parallel without seeing each other's rows.
 */
export async function createTestDatabase(options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  const releaseConnections = await reserveConnections(options.connections ?? DEFAULT_FILE_CONNECTIONS)
  try {
    return await createReserved(options, releaseConnections)
  } catch (error) {
    await releaseConnections()
    throw error
  }
}

async function createReserved(options: TestDatabaseOptions, releaseConnections: () => Promise<void>): Promise<TestDatabase> {
  const adminUrl = inject('adminUrl')
  const template = inject('templateDatabase')
  const schema = inject('schema')
  const name = `oncely_test_${template.replace('oncely_template_', '')}_${randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await admin.query(partitionsOfNewDatabases === undefined ? `CREATE DATABASE ${name} TEMPLATE ${template}` : `CREATE DATABASE ${name}`)
        break
      } catch (error) {
        // 55006: the template is briefly in use by another file's CREATE DATABASE.
        if ((error as { code?: string }).code !== '55006' || attempt > 50) throw error
        await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 100))
      }
    }
  } finally {
    await admin.end()
  }
  const url = withDatabase(adminUrl, name)
  const pools: pg.Pool[] = []
  const newPool = (max = options.max ?? 10, settings: pg.PoolConfig = {}): pg.Pool => {
    const pool = new pg.Pool({ connectionString: url, max, idleTimeoutMillis: 1000, ...settings })
    pools.push(pool)
    return pool
  }
  const pool = newPool()
  if (partitionsOfNewDatabases !== undefined) await migrate({ pool, schema, partitions: partitionsOfNewDatabases })
  const untrack = trackOpenHandle(`database ${name}`)
  return {
    url,
    pool,
    schema,
    newPool,
    async close() {
      await Promise.all(pools.map((p) => p.end()))
      const dropper = new pg.Client({ connectionString: adminUrl })
      await dropper.connect()
      // A pool's end() resolves while its backends may still be closing; killing them then
      // (FORCE) makes the server send a FATAL to a client that no longer listens for errors.
      // So wait until they are gone, and force only what a test left behind.
      for (let waited = 0; waited < 5000; waited += 50) {
        const { rows } = await dropper.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [name])
        if (rows[0]?.n === 0) break
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      await dropper.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await dropper.end()
      await releaseConnections()
      untrack()
    },
  }
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  return parsed.toString()
}
