import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { openRaceServer } from '../../src/cli/race/database-server.js'
import { withTransaction, type PoolClientLike, type PoolLike, type QueryConfig, type QueryResult } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// The store's plumbing, in process: withTransaction's commit, rollback and connection hand-back,
// and the race's database statements on the suite's server.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE plumbing_rows (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

const rowExists = async (id: string) => ((await db.pool.query('SELECT 1 FROM plumbing_rows WHERE id = $1', [id])).rowCount ?? 0) === 1

/** The suite's pool, with what each checked-out connection was released with. */
function recordingReleases(pool: pg.Pool): PoolLike & { releases: Array<boolean | Error | undefined> } {
  const releases: Array<boolean | Error | undefined> = []
  return {
    releases,
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      const result: QueryResult<unknown> = await pool.query(config)
      return result as QueryResult<R>
    },
    async connect(): Promise<PoolClientLike> {
      const client = await pool.connect()
      // A connection killed under a test reports it here too, as well as to the query it failed.
      client.on('error', () => undefined)
      return {
        query: (config) => client.query(config),
        release: (destroy?: boolean | Error) => {
          releases.push(destroy)
          client.release(destroy)
        },
      } as PoolClientLike
    },
  }
}

describe('withTransaction', () => {
  it("commits work's writes, resolves to its value and gives the connection back", async () => {
    const pool = recordingReleases(db.pool)
    const value = await withTransaction(pool, async (tx) => {
      await tx.query({ text: 'INSERT INTO plumbing_rows (id) VALUES ($1)', values: ['committed'] })
      return 42
    })
    expect(value).toBe(42)
    expect(await rowExists('committed')).toBe(true)
    expect(pool.releases).toEqual([undefined])
  })

  it("rolls work's writes back on its error, rethrows that error and gives the connection back whole", async () => {
    const pool = recordingReleases(db.pool)
    const failure = new Error('work failed')
    const error: unknown = await withTransaction(pool, async (tx) => {
      await tx.query({ text: 'INSERT INTO plumbing_rows (id) VALUES ($1)', values: ['rolled-back'] })
      throw failure
    }).catch((caught: unknown) => caught)
    expect(error).toBe(failure)
    expect(await rowExists('rolled-back')).toBe(false)
    expect(pool.releases).toEqual([undefined])
    // The connection went back clean: the next transaction on it is not inside the aborted one.
    expect(await withTransaction(pool, async (tx) => (await tx.query<{ n: number }>({ text: 'SELECT 1 AS n' })).rows[0]?.n)).toBe(1)
  })

  it('destroys a connection that cannot roll back, releasing it with the rollback error, and still rethrows the work error', async () => {
    const pool = recordingReleases(db.newPool(2))
    const error: unknown = await withTransaction(pool, async (tx) => {
      // The connection dies under the work: its ROLLBACK cannot be sent either.
      await tx.query({ text: 'SELECT pg_terminate_backend(pg_backend_pid())' })
    }).catch((caught: unknown) => caught)
    expect(error).toMatchObject({ code: '57P01' })
    expect(pool.releases).toHaveLength(1)
    expect(pool.releases[0]).toBeInstanceOf(Error)
    expect(pool.releases[0]).not.toBe(error)
  })
})

describe("the race's databases (oncely race) on the suite's server", () => {
  it('creates a database whose name needs quoting, replaces one left over, and drops it while a session is still on it', async () => {
    const server = await openRaceServer(inject('adminUrl'), () => {})
    const name = `oncely race "q" ${process.pid}`
    const exists = async () => (await db.pool.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 1
    try {
      expect(server.source).toBe('DATABASE_URL')
      expect(server.version).toMatch(/^\d+/)
      await server.createDatabase(name)
      // Created again: the leftover is dropped first, not an error.
      const url = await server.createDatabase(name)
      const session = new pg.Client({ connectionString: url })
      session.on('error', () => {})
      await session.connect()
      expect((await session.query<{ name: string }>('SELECT current_database() AS name')).rows[0]?.name).toBe(name)
      await server.dropDatabase(name)
      expect(await exists()).toBe(false)
      await expect(session.query('SELECT 1')).rejects.toThrow()
      await session.end().catch(() => undefined)
      // Dropping one that is gone is not an error either.
      await server.dropDatabase(name)
    } finally {
      await server.close()
    }
    expect(await exists()).toBe(false)
  })

  it('refuses a database name PostgreSQL cannot take, naming the option', async () => {
    const server = await openRaceServer(inject('adminUrl'), () => {})
    try {
      await expect(server.createDatabase('')).rejects.toThrow('option database must be a non-empty string of at most 63 characters')
    } finally {
      await server.close()
    }
  })
})
