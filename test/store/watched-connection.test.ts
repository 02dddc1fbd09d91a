import net from 'node:net'
import pg from 'pg'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { beginOf, flight, transaction } from '../../src/store/postgres/statement-runner.js'
import type { PoolClientLike, PoolLike, QueryConfig, QueryResult } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// The store's transactions run on any `pg`-shaped pool, not only pg's own (issue 24's mutation
// rerun found both of these unpinned): a connection without a node-postgres socket underneath,
// and a pool that does not watch the connections given back to it.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE entries (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

const insert = (id: string) => ({ text: 'INSERT INTO entries (id) VALUES ($1)', values: [id] })
/** `queryable.query` typed as the store's port: pg's own result type, as the store reads it. */
const forward = async <R>(queryable: pg.Pool | pg.PoolClient | pg.Client, config: QueryConfig): Promise<QueryResult<R>> => {
  const result: QueryResult<unknown> = await queryable.query(config)
  return result as QueryResult<R>
}
const present = async (id: string) => (await db.pool.query('SELECT 1 FROM entries WHERE id = $1', [id])).rowCount

it('a connection with no socket to cork (a wrapper, another driver) runs a flight and a transaction as sent', async () => {
  const inner = db.newPool(1)
  // Only query and release: nothing of node-postgres's client shows through.
  const wrapped: PoolLike = {
    query: (config) => forward(inner, config),
    connect: async () => {
      const client = await inner.connect()
      const connection: PoolClientLike = { query: (config) => forward(client, config), release: (destroy) => client.release(destroy) }
      return connection
    },
  }
  const results = await flight(wrapped, ['BEGIN'], 5000, [insert('wrapped-flight'), { text: 'SELECT count(*)::int AS n FROM entries WHERE id = $1', values: ['wrapped-flight'] }])
  expect(results.map((result) => result.rows)).toEqual([[], [{ n: 1 }]])
  await transaction(wrapped, beginOf(['BEGIN']), 5000, async (tx) => {
    await tx.query(insert('wrapped-transaction'))
  })
  expect(await present('wrapped-transaction')).toBe(1)
})

it("a connection that broke, given back to a pool that does not watch it, keeps the store's error listener: its late error crashes nothing", async () => {
  const client = new pg.Client({ connectionString: db.url })
  await client.connect()
  let released: boolean | Error | undefined
  // A pool of one connection that neither destroys a broken connection nor listens to it.
  const unwatched: PoolLike = {
    query: (config) => forward(client, config),
    connect: async () => Object.assign(client, { release: (destroy?: boolean | Error) => void (released = destroy) }),
  }
  const statementTimeoutMs = 200
  // BEGIN leaves with the first statement; the second outlasts the store's timeout, which breaks
  // the connection without closing it (node-postgres's read timeout).
  const working = transaction(unwatched, beginOf(['BEGIN']), statementTimeoutMs, async (tx) => {
    await tx.query({ text: 'SELECT 1' })
    await tx.query({ text: 'SELECT pg_sleep(30)' })
  })
  await expect(working).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })
  // Given back as broken, and still listened to.
  expect(released).toBeInstanceOf(Error)
  expect(client.listenerCount('error')).toBe(1)
  const late = new Promise<Error>((resolve) => client.prependOnceListener('error', resolve))
  await db.pool.query('SELECT pg_terminate_backend($1)', [(client as unknown as { processID: number }).processID])
  // Its backend terminated: the connection reports an 'error' event ("Connection terminated
  // unexpectedly"), which an EventEmitter without a listener would throw out of the process.
  expect((await late).message).toMatch(/terminat/i)
  expect(client.listenerCount('error')).toBe(1)
})

it("a node-postgres connection over a socket that cannot cork (pg-cloudflare's is an EventEmitter) runs a flight and a transaction, pipelining or not", async () => {
  for (const pipeline of [false, true]) {
    // node-postgres corks only a stream that has `cork` (its query.js); this one has none.
    const pool = db.newPool(1, { pipeline, stream: () => Object.defineProperties(new net.Socket(), { cork: { value: undefined }, uncork: { value: undefined } }) })
    const results = await flight(pool, ['BEGIN'], 5000, [insert(`uncorked-flight-${pipeline}`), { text: 'SELECT count(*)::int AS n FROM entries WHERE id = $1', values: [`uncorked-flight-${pipeline}`] }])
    expect(results.map((result) => result.rows)).toEqual([[], [{ n: 1 }]])
    await transaction(pool, beginOf(['BEGIN']), 5000, async (tx) => {
      await Promise.all([tx.query(insert(`uncorked-transaction-${pipeline}-a`)), tx.query(insert(`uncorked-transaction-${pipeline}-b`))])
    })
    expect([await present(`uncorked-transaction-${pipeline}-a`), await present(`uncorked-transaction-${pipeline}-b`)]).toEqual([1, 1])
  }
})

it("a plain connection's statements leave from node-postgres's own answer, as from its queue: the driver is idle ('drain') only after the COMMIT", async () => {
  const pool = db.newPool(1)
  const client = await pool.connect()
  let drains = 0
  client.on('drain', () => drains++)
  client.release()
  await flight(pool, ['BEGIN'], 5000, [insert('drain-flight-a'), insert('drain-flight-b')])
  expect(drains).toBe(1)
  await transaction(pool, beginOf(['BEGIN']), 5000, async (tx) => {
    await Promise.all([tx.query(insert('drain-transaction-a')), tx.query(insert('drain-transaction-b'))])
  })
  // BEGIN with the first write (one query of a single Sync), the second write, then COMMIT.
  expect(drains).toBe(4)
  expect([await present('drain-flight-b'), await present('drain-transaction-b')]).toEqual([1, 1])
})
