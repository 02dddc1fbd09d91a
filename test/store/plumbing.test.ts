import 'reflect-metadata'
import { sql as drizzleSql } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/node-postgres'
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import postgres from 'postgres'
import { DataSource } from 'typeorm'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { openRaceServer } from '../../src/cli/race/database-server.js'
import { isOncelyError } from '../../src/errors.js'
import { fromDrizzle, fromKysely, fromPostgresJs, fromTypeORM, withTransaction, type PoolClientLike, type PoolLike, type Queryable, type QueryConfig, type QueryResult } from '../../src/store/postgres/index.js'
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
    // Its own pool: the row is then read on another connection, where only a commit shows it.
    const pool = recordingReleases(db.newPool(1))
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
      await expect(server.createDatabase('')).rejects.toThrow('option database must be a non-empty string of at most 63 bytes in UTF-8')
    } finally {
      await server.close()
    }
  })
})

describe('the shims: what each library answers, as a Queryable', () => {
  const update = { text: 'UPDATE plumbing_rows SET id = id WHERE id IN ($1, $2, $3)', values: ['shim-a', 'shim-b', 'shim-none'] }
  const select = { text: 'SELECT id FROM plumbing_rows WHERE id IN ($1, $2) ORDER BY id', values: ['shim-a', 'shim-b'] }
  beforeAll(async () => {
    await db.pool.query(`INSERT INTO plumbing_rows (id) VALUES ('shim-a'), ('shim-b')`)
  })

  /** The affected count of an UPDATE and the rows (and their count) of a SELECT, through `tx`. */
  async function answers(tx: Queryable) {
    const updated = await tx.query(update)
    const selected = await tx.query<{ id: string }>(select)
    // A statement without values: the shim binds none.
    const plain = await tx.query<{ one: number }>({ text: 'SELECT 1 AS one' })
    return { updated: updated.rowCount, selected: [selected.rowCount, selected.rows.map((row) => row.id)], plain: plain.rows.map((row) => Number(row.one)) }
  }
  const expected = { updated: 2, selected: [2, ['shim-a', 'shim-b']], plain: [1] }

  it('postgres.js', async () => {
    const sql = postgres(db.url, { max: 1, onnotice: () => undefined })
    try {
      expect(await answers(fromPostgresJs(sql))).toEqual(expected)
    } finally {
      await sql.end()
    }
  })

  it('Kysely', async () => {
    const kysely = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 1 }) }) })
    try {
      expect(await answers(fromKysely(kysely))).toEqual(expected)
    } finally {
      await kysely.destroy()
    }
  })

  it('Drizzle on node-postgres and on postgres.js, with placeholders out of order and used twice', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 })
    const client = postgres(db.url, { max: 1, onnotice: () => undefined })
    try {
      for (const tx of [fromDrizzle(drizzle(pool), drizzleSql), fromDrizzle(drizzlePostgresJs(client), drizzleSql)]) {
        expect(await answers(tx)).toEqual(expected)
        const { rows } = await tx.query<{ b: string; a: string; again: string }>({ text: 'SELECT $2::text AS b, $1::text AS a, $1::text AS again', values: ['A', 'B'] })
        expect(rows).toEqual([{ b: 'B', a: 'A', again: 'A' }])
        // Placeholders past $9 are one number each, not $1 followed by a digit.
        const values = Array.from({ length: 11 }, (_, i) => `v${i + 1}`)
        const eleven = await tx.query<Record<string, string>>({ text: `SELECT ${values.map((_, i) => `$${i + 1}::text AS p${i + 1}`).join(', ')}`, values })
        expect(Object.values(eleven.rows[0] ?? {})).toEqual(values)
      }
    } finally {
      await pool.end()
      await client.end()
    }
  })

  it("Drizzle on a driver that reports no affected count: ONCELY_STORE_UNEXPECTED, never a count it made up", async () => {
    const refusals = [
      // A result object without rowCount, an array without count, an object without rows.
      { execute: async () => ({ rows: [] }) },
      { execute: async () => [] },
      { execute: async () => ({ rowCount: 1 }) },
    ]
    for (const driver of refusals) {
      const error: unknown = await fromDrizzle(driver, drizzleSql).query(update).catch((caught: unknown) => caught)
      expect(isOncelyError(error, 'ONCELY_STORE_UNEXPECTED')).toBe(true)
      expect((error as Error).message).toBe("fromDrizzle: this Drizzle driver's result has neither rowCount (node-postgres) nor count (postgres.js), so a completion cannot be confirmed")
    }
    // A statement that touches no rows (SET, BEGIN) reports a null rowCount on node-postgres: that is an answer.
    expect(await fromDrizzle({ execute: async () => ({ rows: [], rowCount: null }) }, drizzleSql).query({ text: 'SET x = 1' })).toEqual({ rows: [], rowCount: null })
  })

  it('TypeORM', async () => {
    const source = new DataSource({ type: 'postgres', url: db.url, poolSize: 1 })
    await source.initialize()
    const runner = source.createQueryRunner()
    try {
      expect(await answers(fromTypeORM(runner))).toEqual(expected)
    } finally {
      await runner.release()
      await source.destroy()
    }
  })
})
