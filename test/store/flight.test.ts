import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { beginOf, flight, isPipelining, transaction, withTransaction } from '../../src/store/postgres/statement-runner.js'
import { writeInOneFlight } from '../../src/store/postgres/index.js'
import { countingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { countSocketWrites } from '../helpers/socket-writes.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'

// Issue 11: the store's transactions sent whole (`flight`) and statement by statement
// (`transaction`) on the connections they check out: the store's timeout on every statement (one
// for the whole of a pipelined flight, whose statements leave together), a broken connection never
// given back to the pool, no listener left behind.

let db: TestDatabase
let proxy: TcpProxy
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE marks (id text PRIMARY KEY)')
  proxy = await startTcpProxy(db.url)
})
afterAll(async () => {
  await proxy.close()
  await db.close()
})

const mark = (id: string) => ({ text: 'INSERT INTO marks (id) VALUES ($1)', values: [id] })

async function marked(id: string) {
  return (await db.pool.query('SELECT 1 FROM marks WHERE id = $1', [id])).rowCount
}

describe('isPipelining', () => {
  it('is true only for a connection made with pipeline: true', () => {
    expect([isPipelining({ pipeline: true }), isPipelining({ pipeline: 'true' }), isPipelining({}), isPipelining(null), isPipelining(undefined), isPipelining('pipeline')]).toEqual([
      true,
      false,
      false,
      false,
      false,
      false,
    ])
  })
})

describe('a flight', () => {
  for (const pipeline of [true, false]) {
    it(`commits its statements in order (${pipeline ? 'pipelining' : 'queued by a plain'} connection) and resolves to their results`, async () => {
      const pool = db.newPool(1, { pipeline })
      const results = await flight(pool, ['BEGIN'], 5000, [mark(`in-order-${pipeline}`), { text: 'SELECT count(*)::int AS n FROM marks WHERE id = $1', values: [`in-order-${pipeline}`] }])
      expect(results.map((result) => result.rows)).toEqual([[], [{ n: 1 }]])
    })
  }

  it('on a pipelining connection leaves in one socket write: BEGIN, the statements and COMMIT (issue 21)', async () => {
    const pool = db.newPool(1, { pipeline: true })
    const counted = await countSocketWrites(pool)
    await flight(pool, ['BEGIN'], 5000, [mark('one-write-1'), mark('one-write-2'), { text: 'SELECT count(*)::int AS n FROM marks WHERE id LIKE $1', values: ['one-write-%'] }])
    expect(counted.writes).toBe(1)
    expect(await marked('one-write-2')).toBe(1)
  })

  for (const pipeline of [true, false]) {
    it(`a database that stops answering (${pipeline ? 'pipelining' : 'plain'} connection): ONCELY_STORE_UNAVAILABLE after the store timeout, and the connection is destroyed, never reused`, async () => {
      const pool = new pg.Pool({ connectionString: proxy.url, max: 1, pipeline })
      pool.on('error', () => undefined)
      try {
        await pool.query('SELECT 1')
        proxy.stall()
        const startedAt = performance.now()
        const error = await flight(pool, ['BEGIN'], 300, [mark('stalled'), mark('stalled-2')]).then(
          () => undefined,
          (failure: unknown) => failure as Error,
        )
        expect(error).toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE', message: 'the connection to PostgreSQL failed during a transaction' })
        // Pipelining, the flight's statements left together and are given up on together, once.
        if (pipeline) expect((error?.cause as Error).message).toBe('PostgreSQL did not answer within 300 ms')
        expect(performance.now() - startedAt).toBeLessThan(3000)
        expect(pool.totalCount).toBe(0)
      } finally {
        proxy.restore()
        await pool.end()
      }
    })
  }

  it("a transaction keeps a statement's own query_timeout over the store's", async () => {
    // Not pipelining: BEGIN leaves with the first statement and is answered; only then the answers stop.
    const pool = new pg.Pool({ connectionString: proxy.url, max: 1 })
    pool.on('error', () => undefined)
    let startedAt = 0
    try {
      await expect(
        transaction(pool, beginOf(['BEGIN']), 100, async (tx) => {
          await tx.query({ text: 'SELECT 0' })
          proxy.stall()
          startedAt = performance.now()
          await tx.query({ text: 'SELECT 1', query_timeout: 800 })
        }),
      ).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })
      // A lower bound only: the store's 100 ms would have ended it long before.
      expect(performance.now() - startedAt).toBeGreaterThanOrEqual(700)
    } finally {
      proxy.restore()
      await pool.end()
    }
  })

  it('leaves no error listener behind on a connection it gives back', async () => {
    const pool = db.newPool(1, { pipeline: true })
    const listeners = async () => {
      const client = await pool.connect()
      const count = client.listenerCount('error')
      client.release()
      return count
    }
    const before = await listeners()
    for (let i = 0; i < 12; i++) {
      await flight(pool, ['BEGIN'], 5000, [mark(`listener-${i}`)])
      await transaction(pool, beginOf(['BEGIN']), 5000, async (tx) => void (await tx.query(mark(`listener-tx-${i}`))))
    }
    expect(await listeners()).toBe(before)
    expect(await marked('listener-11')).toBe(1)
  })

  it("withTransaction runs on the store's runner: a connection terminated mid-transaction fails the work, does not crash the process, and is not reused", async () => {
    const pool = db.newPool(1)
    let lost: unknown
    await expect(
      withTransaction(pool, async (tx) => {
        const { rows } = await tx.query<{ pid: number }>({ text: 'SELECT pg_backend_pid() AS pid' })
        const closed = new Promise((resolve) => (tx as unknown as pg.PoolClient).once('end', resolve))
        await db.pool.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid])
        // The server's FATAL arrives while no statement runs: pg emits it as the client's 'error'.
        await closed
        await tx.query({ text: 'SELECT 1' }).catch((error: unknown) => (lost = error))
        throw lost
      }),
    ).rejects.toBeInstanceOf(Error)
    expect(lost).toBeInstanceOf(Error)
    expect(pool.totalCount).toBe(0)
    expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
  })
})

describe('writeInOneFlight (oncely/postgres, issue 24)', () => {
  it('commits its statements in one round trip on a pipelining pool, or none of them', async () => {
    const pool = countingPool(db.newPool(1, { pipeline: true }))
    await writeInOneFlight(pool, [mark('public-a'), mark('public-b')])
    expect(pool.statements).toEqual(['BEGIN', 'INSERT INTO', 'INSERT INTO', 'COMMIT'])
    expect(pool.roundTrips()).toBe(1)
    expect([await marked('public-a'), await marked('public-b')]).toEqual([1, 1])

    // The second statement fails (the row exists): the first is rolled back with it.
    await expect(writeInOneFlight(pool, [mark('public-c'), mark('public-a')])).rejects.toMatchObject({ code: '23505' })
    expect(await marked('public-c')).toBe(0)
  })

  it('refuses a timeout that is not a positive integer, naming it', async () => {
    await expect(writeInOneFlight(db.pool, [mark('public-d')], { timeoutMs: 0 })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining('timeoutMs') as unknown })
    expect(await marked('public-d')).toBe(0)
  })
})
