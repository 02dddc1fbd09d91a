import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { flight, transactionInTwoFlights } from '../../src/store/postgres/statement-runner.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// Issue 21: a flight on a node-postgres connection is one query ending in a single Sync. The
// server answers the whole transaction with one ReadyForQuery (one flush) instead of one per
// statement, and a connection that does not pipeline sends it in one write instead of waiting for
// each statement's answer before the next.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE sync_marks (id text PRIMARY KEY, n integer)')
  await db.pool.query('CREATE TABLE sync_deferred (id text, CONSTRAINT sync_deferred_once UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)')
})
afterAll(async () => {
  await db.close()
})

const mark = (id: string, n = 1) => ({ text: 'INSERT INTO sync_marks (id, n) VALUES ($1, $2)', values: [id, n] })
const namedMark = (id: string) => ({ name: 'one_sync_named_mark', text: 'INSERT INTO sync_marks (id, n) VALUES ($1, 7)', values: [id] })

async function marked(id: string) {
  return (await db.pool.query('SELECT 1 FROM sync_marks WHERE id = $1', [id])).rowCount
}

/**
 * The one connection of `pool` (max 1), watched: its socket writes, and the ReadyForQuery messages
 * the server sends it (one per Sync, each the end of a flush of the server's).
 */
async function watched(pool: pg.Pool): Promise<{ writes: number; readies: number; sent: string[]; reset(): void }> {
  const client = await pool.connect()
  const counts = {
    writes: 0,
    readies: 0,
    /** The type byte of the first message of each write ('X': Terminate). */
    sent: [] as string[],
    reset() {
      counts.writes = 0
      counts.readies = 0
      counts.sent.length = 0
    },
  }
  const connection = (client as unknown as { connection: pg.Connection & { stream: Record<'_write' | '_writev', (...args: unknown[]) => unknown> } }).connection
  const firstByte = (chunk: unknown): string => (Array.isArray(chunk) ? firstByte((chunk[0] as { chunk: unknown }).chunk) : String.fromCharCode((chunk as Buffer)[0]!))
  for (const method of ['_write', '_writev'] as const) {
    const original = connection.stream[method].bind(connection.stream)
    connection.stream[method] = (...args: unknown[]) => (counts.writes++, counts.sent.push(firstByte(args[0])), original(...args))
  }
  connection.on('readyForQuery', () => counts.readies++)
  client.release()
  return counts
}

/** node-postgres's own parser of a type's text. */
const builtIn = (oid: number) => pg.types.getTypeParser(oid, 'text') as (value: string) => unknown

const kinds = [
  { pipeline: true, name: 'pipelining' },
  { pipeline: false, name: 'plain' },
]

describe('a flight on a node-postgres connection: one query, one Sync', () => {
  for (const { pipeline, name } of kinds) {
    it(`leaves in one write and is answered with one ReadyForQuery (${name} connection), BEGIN's commands included`, async () => {
      const pool = db.newPool(1, { pipeline })
      const counts = await watched(pool)
      const results = await flight(pool, ['BEGIN', 'SET LOCAL lock_timeout = 1000'], 5000, [
        mark(`one-${name}-a`),
        mark(`one-${name}-b`),
        { text: 'SELECT count(*)::int AS n FROM sync_marks WHERE id LIKE $1', values: [`one-${name}-%`] },
      ])
      expect(counts).toMatchObject({ writes: 1, readies: 1 })
      expect(results.map((result) => [result.rows, result.rowCount])).toEqual([
        [[], 1],
        [[], 1],
        [[{ n: 2 }], 1],
      ])
      expect([await marked(`one-${name}-a`), await marked(`one-${name}-b`)]).toEqual([1, 1])
    })
  }

  it('a named statement the connection has not prepared goes the way node-postgres prepares it; once prepared, the flight is one write', async () => {
    const pool = db.newPool(1, { pipeline: false })
    const counts = await watched(pool)
    await flight(pool, ['BEGIN'], 5000, [namedMark('named-first')])
    // BEGIN, the statement and COMMIT, each after the answer to the one before.
    expect(counts).toMatchObject({ writes: 3, readies: 3 })
    counts.reset()
    await flight(pool, ['BEGIN'], 5000, [namedMark('named-second'), mark('named-second-plain')])
    expect(counts).toMatchObject({ writes: 1, readies: 1 })
    expect([await marked('named-first'), await marked('named-second'), await marked('named-second-plain')]).toEqual([1, 1, 1])
  })

  for (const { pipeline, name } of kinds) {
    it(`a statement that fails (${name} connection): its error is thrown, the writes before it are rolled back, and the connection serves the next flight`, async () => {
      const pool = db.newPool(1, { pipeline })
      await flight(pool, ['BEGIN'], 5000, [mark(`taken-${name}`), namedMark(`named-${name}`)])
      const counts = await watched(pool)
      const failure = flight(pool, ['BEGIN'], 5000, [mark(`rolled-back-${name}`), mark(`taken-${name}`), namedMark(`after-failure-${name}`)])
      await expect(failure).rejects.toMatchObject({ code: '23505', constraint: 'sync_marks_pkey' })
      // The flight, then the ROLLBACK its skipped COMMIT left to send.
      expect(counts).toMatchObject({ writes: 2, readies: 2 })
      expect([await marked(`rolled-back-${name}`), await marked(`after-failure-${name}`)]).toEqual([0, 0])
      // Not left in the aborted transaction: the next flight, its named statement too, commits.
      await flight(pool, ['BEGIN'], 5000, [namedMark(`next-${name}`)])
      expect(await marked(`next-${name}`)).toBe(1)
      expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    })
  }

  it('a failure at COMMIT (a deferred constraint): its error is thrown, nothing commits, and the connection serves the next flight', async () => {
    const pool = db.newPool(1, { pipeline: false })
    const counts = await watched(pool)
    const twice = { text: 'INSERT INTO sync_deferred (id) VALUES ($1), ($1)', values: ['deferred'] }
    await expect(flight(pool, ['BEGIN'], 5000, [mark('before-deferred'), twice])).rejects.toMatchObject({ code: '23505', constraint: 'sync_deferred_once' })
    // The flight, and the ROLLBACK sent after any failure (here it finds no transaction: a no-op).
    expect(counts).toMatchObject({ writes: 2, readies: 2 })
    expect(await marked('before-deferred')).toBe(0)
    await flight(pool, ['BEGIN'], 5000, [mark('after-deferred')])
    expect(await marked('after-deferred')).toBe(1)
  })

  for (const { pipeline, name } of kinds) {
    it(`a value pg cannot send (a cyclic object) fails the flight with nothing written (${name} connection), and its deadline does not outlive it`, async () => {
      const pool = db.newPool(1, { pipeline })
      const counts = await watched(pool)
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      const failure = flight(pool, ['BEGIN'], 300, [mark(`cyclic-${name}`), { text: 'SELECT $1::jsonb', values: [cyclic] }])
      await expect(failure).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE', cause: expect.any(TypeError) as unknown })
      // Nothing of the flight: the one write is the Terminate of the connection given up on.
      expect(counts.sent).toEqual(['X'])
      expect(await marked(`cyclic-${name}`)).toBe(0)
      // Past the 300 ms deadline, the pool's next connection still answers.
      await new Promise((resolve) => setTimeout(resolve, 400))
      await flight(pool, ['BEGIN'], 300, [mark(`after-cyclic-${name}`)])
      expect(await marked(`after-cyclic-${name}`)).toBe(1)
    })
  }

  it("BEGIN's SET LOCAL statement_timeout holds for the statements after it, and ends with the transaction", async () => {
    const pool = db.newPool(1, { pipeline: true })
    const startedAt = performance.now()
    await expect(flight(pool, ['BEGIN', 'SET LOCAL statement_timeout = 200'], 5000, [mark('slow'), { text: 'SELECT pg_sleep(3)' }])).rejects.toMatchObject({ code: '57014' })
    expect(performance.now() - startedAt).toBeLessThan(2500)
    expect(await marked('slow')).toBe(0)
    const { rows } = await pool.query<{ statement_timeout: string }>('SHOW statement_timeout')
    expect(rows[0]!.statement_timeout).toBe('0')
  })

  it("answers with the pool's own type parsers: numbers, JSON, bytea, dates, NULL, and a parser of the pool's", async () => {
    const types = { getTypeParser: (oid: number) => (oid === 20 ? (value: string) => BigInt(value) : builtIn(oid)) }
    const pool = db.newPool(1, { pipeline: true, types })
    await flight(pool, ['BEGIN'], 5000, [mark('typed-a', 3), mark('typed-b', 4)])
    const [selected, updated] = await flight(pool, ['BEGIN'], 5000, [
      { text: `SELECT 1::int AS n, '{"a":[1]}'::jsonb AS j, NULL::text AS t, '\\x0102'::bytea AS b, '2026-12-07T00:00:00Z'::timestamptz AS at, 9007199254740993::int8 AS big`, values: [] },
      { text: 'UPDATE sync_marks SET n = n + 1 WHERE id IN ($1, $2)', values: ['typed-a', 'typed-b'] },
    ])
    expect(selected!.rows).toEqual([{ n: 1, j: { a: [1] }, t: null, b: Buffer.from([1, 2]), at: new Date('2026-12-07T00:00:00Z'), big: 9007199254740993n }])
    expect(updated!.rowCount).toBe(2)
  })

  it("a type parser that throws fails the flight as a broken connection, the parser's error its cause", async () => {
    const broken = new Error('this parser refuses')
    const refuse = () => {
      throw broken
    }
    const types = { getTypeParser: (oid: number) => (oid === 1700 ? refuse : builtIn(oid)) }
    const pool = db.newPool(1, { pipeline: false, types })
    // Without a SQLSTATE, as node-postgres's own path reports it: the connection is not trusted again.
    await expect(flight(pool, ['BEGIN'], 5000, [{ text: 'SELECT 1.5::numeric AS x', values: [] }])).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE', cause: broken })
    expect(pool.totalCount).toBe(0)
  })
})

describe('transactionInTwoFlights: BEGIN with the first statement, the second with COMMIT (the relay\'s claim)', () => {
  const firstOf = (prefix: string) => ({ name: 'two_flights_first', text: 'SELECT id, n FROM sync_marks WHERE id LIKE $1 ORDER BY id', values: [`${prefix}%`] })
  const doubled = (rows: Array<{ id: string; n: number }>) => ({ text: 'UPDATE sync_marks SET n = n * 2 WHERE id = ANY($1::text[]) RETURNING id, n', values: [rows.map((row) => row.id)] })

  it('two writes and two ReadyForQuery on a plain connection once its first statement is prepared; the second made from the first\'s rows', async () => {
    const pool = db.newPool(1, { pipeline: false })
    await flight(pool, ['BEGIN'], 5000, [mark('two-a', 1), mark('two-b', 2)])
    const counts = await watched(pool)
    // The first time, BEGIN and the unprepared statement go one after the other (pg prepares it).
    await transactionInTwoFlights<{ id: string; n: number }>(pool, firstOf('two-'), () => undefined)
    expect(counts).toMatchObject({ writes: 3, readies: 3 })
    counts.reset()
    const [first, second] = await transactionInTwoFlights<{ id: string; n: number }>(pool, firstOf('two-'), ({ rows }) => doubled(rows))
    expect(counts).toMatchObject({ writes: 2, readies: 2 })
    expect(first.rows).toEqual([
      { id: 'two-a', n: 1 },
      { id: 'two-b', n: 2 },
    ])
    expect(second?.rows).toEqual([
      { id: 'two-a', n: 2 },
      { id: 'two-b', n: 4 },
    ])
    expect((await db.pool.query('SELECT n FROM sync_marks WHERE id = $1', ['two-b'])).rows).toEqual([{ n: 4 }])
  })

  for (const { pipeline, name } of kinds) {
    it(`a second statement that fails (${name} connection): the first's writes roll back, its error is thrown, the connection serves the next`, async () => {
      const pool = db.newPool(1, { pipeline })
      await expect(
        transactionInTwoFlights(pool, mark(`two-rolled-back-${name}`), () => ({ text: 'SELECT 1 / 0' })),
      ).rejects.toMatchObject({ code: '22012' })
      expect(await marked(`two-rolled-back-${name}`)).toBe(0)
      const [, second] = await transactionInTwoFlights(pool, mark(`two-next-${name}`), () => undefined)
      expect(second).toBeUndefined()
      expect(await marked(`two-next-${name}`)).toBe(1)
    })
  }
})

describe('transactionInTwoFlights on a connection that dies', () => {
  const suicide = { text: 'SELECT pg_terminate_backend(pg_backend_pid())' }

  for (const [where, first, next] of [
    ['in the first flight', () => suicide, () => undefined],
    ['in the second flight, after the first wrote', (id: string) => mark(id), () => suicide],
  ] as const) {
    it(`terminated ${where}: the failure is thrown, nothing commits, the connection is not reused`, async () => {
      const pool = db.newPool(1, { pipeline: false })
      pool.on('error', () => undefined)
      const id = `two-terminated-${where.length}`
      await expect(transactionInTwoFlights(pool, first(id), next)).rejects.toBeInstanceOf(Error)
      expect(await marked(id)).toBe(0)
      expect(pool.totalCount).toBe(0)
      const [, second] = await transactionInTwoFlights(pool, mark(`${id}-after`), () => undefined)
      expect(second).toBeUndefined()
      expect(await marked(`${id}-after`)).toBe(1)
    })
  }
})
