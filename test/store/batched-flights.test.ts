import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import type { Fence } from '../../src/engine/store.js'
import { createOutbox } from '../../src/outbox/index.js'
import { createPostgresStore, type PostgresStore, type QueryConfig } from '../../src/store/postgres/index.js'
import { MAX_BATCHED_BODY_BYTES } from '../../src/store/postgres/batched-writes.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { jsonResponse, keyTable, owned, storeClaim } from '../helpers/engine.js'
import { startTcpProxy } from '../helpers/tcp-proxy.js'

// Issue 21: completions that carry the caller's writes (`complete(response, { statements })`) are
// flights; the flights that arrive while one is in flight leave together as one transaction, one
// round trip and one commit. Each must still commit with its own writes or not at all, and be
// decided as it would be alone: a lost fence, a refused write or a lock it waits on fails that
// flight only, and the others commit.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE flight_rows (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 21 } })
const insertRow = (id: string): QueryConfig => ({ text: 'INSERT INTO flight_rows (id) VALUES ($1)', values: [id] })

/** A pool of one connection (plain unless `settings` say otherwise) and the ReadyForQuery messages it is sent: one per Sync, one per flight. */
async function watchedPool(settings: pg.PoolConfig = { pipeline: false }): Promise<{ pool: pg.Pool; readies: { count: number } }> {
  const pool = db.newPool(1, settings)
  const client = await pool.connect()
  const readies = { count: 0 }
  ;(client as unknown as { connection: pg.Connection }).connection.on('readyForQuery', () => readies.count++)
  client.release()
  return { pool, readies }
}

/** `count` keys of a new scope claimed through `store`, each with its fence. */
async function claimed(store: PostgresStore, count: number): Promise<{ scope: string; fences: Fence[] }> {
  const scope = `flights-${randomUUID().slice(0, 8)}`
  const fences: Fence[] = []
  for (let n = 0; n < count; n++) {
    const key = `k${n}`
    const attempt = await storeClaim(store, { scope, key, fingerprint })
    if (attempt.kind !== 'claimed') throw new Error(`${key} was not free`)
    fences.push({ scope, key, fenceToken: attempt.claim.fenceToken })
  }
  return { scope, fences }
}

/** The completion of `fence` as a flight with `writes`. */
function completeWith(store: PostgresStore, fence: Fence, writes: QueryConfig[]): Promise<boolean> {
  return store.complete(fence, { status: 'completed', response: jsonResponse(201, `{"key":"${fence.key}"}`), statements: writes })
}

/** Each completion's outcome: its answer, or its error's SQLSTATE or code. */
async function outcomes(completions: Array<Promise<boolean>>): Promise<Array<boolean | string>> {
  const settled = await Promise.allSettled(completions)
  return settled.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : String((outcome.reason as { code?: unknown }).code ?? outcome.reason)))
}

/** Each key's row: its status and the transaction that wrote it last (`xmin`), by key. */
async function keyRows(scope: string): Promise<Array<{ key: string; status: string; xmin: string }>> {
  const { rows } = await db.pool.query<{ key: string; status: string; xmin: string }>(`SELECT key, status, xmin::text FROM ${keyTable(db)} WHERE scope = $1 ORDER BY key`, [scope])
  return rows
}

async function written(ids: string[]): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string }>('SELECT id FROM flight_rows WHERE id = ANY($1) ORDER BY id', [ids])
  return rows.map((row) => row.id)
}

/** A store on a watched pool of one connection whose flight statement is already prepared (a first flight prepares it, in more round trips). */
async function warmedStore(settings?: pg.PoolConfig, options: { maxBatchSize?: number; lockTimeoutMs?: number } = {}) {
  const { pool, readies } = await watchedPool(settings)
  const store = createPostgresStore({ pool, schema: db.schema, ...options })
  const warm = await claimed(store, 1)
  expect(await completeWith(store, warm.fences[0] as Fence, [insertRow(`warm-${warm.scope}`)])).toBe(true)
  return { store, readies }
}

/** The backends of this database waiting for a lock, once there are `count` (a row lock's wait is on a transaction id, of no database). */
async function waiting(count: number): Promise<number[]> {
  for (;;) {
    const { rows } = await db.pool.query<{ pid: number }>('SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database()')
    if (rows.length >= count) return rows.map((row) => row.pid)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

describe('flights that arrive while one is in flight share one transaction', () => {
  it.each([
    ['plain', false],
    ['pipelining', true],
  ])('on a %s pool: five at once, the first alone, the four behind it in one transaction, each with its own writes', async (_kind, pipeline) => {
    const { store, readies } = await warmedStore({ pipeline })
    const { scope, fences } = await claimed(store, 5)
    readies.count = 0
    const ids = fences.map((fence) => `${scope}-${fence.key}`)
    expect(await outcomes(fences.map((fence, n) => completeWith(store, fence, [insertRow(`${ids[n]}-a`), insertRow(`${ids[n]}-b`)])))).toEqual([true, true, true, true, true])
    // Two flights, two answers: the first, then the four that queued behind it.
    expect(readies.count).toBe(2)
    const rows = await keyRows(scope)
    expect(rows.map((row) => row.status)).toEqual(['completed', 'completed', 'completed', 'completed', 'completed'])
    const [first, ...rest] = rows.map((row) => row.xmin)
    expect(new Set(rest).size).toBe(1)
    expect(rest).not.toContain(first)
    expect(await written(ids.flatMap((id) => [`${id}-a`, `${id}-b`]))).toHaveLength(10)
  })

  it('maxBatchSize 1 sends each flight alone: five transactions, five answers', async () => {
    const { store, readies } = await warmedStore(undefined, { maxBatchSize: 1 })
    const { scope, fences } = await claimed(store, 5)
    readies.count = 0
    expect(await outcomes(fences.map((fence) => completeWith(store, fence, [insertRow(`${scope}-${fence.key}`)])))).toEqual([true, true, true, true, true])
    expect(readies.count).toBe(5)
    expect(new Set((await keyRows(scope)).map((row) => row.xmin)).size).toBe(5)
  })

  it('maxBatchSize bounds how many flights one transaction carries', async () => {
    const { store } = await warmedStore(undefined, { maxBatchSize: 2 })
    const { scope, fences } = await claimed(store, 5)
    expect(await outcomes(fences.map((fence) => completeWith(store, fence, [insertRow(`${scope}-${fence.key}`)])))).toEqual([true, true, true, true, true])
    // The first alone, then two and two.
    const xmins = (await keyRows(scope)).map((row) => row.xmin)
    expect(new Set(xmins).size).toBe(3)
    expect([xmins[1] === xmins[2], xmins[3] === xmins[4]]).toEqual([true, true])
  })
})

describe('a flight whose response body is over 16 KiB', () => {
  it('is sent alone, and the flights around it share their transaction', async () => {
    const { store } = await warmedStore()
    const { scope, fences } = await claimed(store, 4)
    const large = { status: 'completed' as const, response: jsonResponse(201, JSON.stringify({ padding: 'x'.repeat(MAX_BATCHED_BODY_BYTES) })) }
    const completions = fences.map((fence, n) =>
      n === 2 ? store.complete(fence, { ...large, statements: [insertRow(`${scope}-${fence.key}`)] }) : completeWith(store, fence, [insertRow(`${scope}-${fence.key}`)]),
    )
    expect(await outcomes(completions)).toEqual([true, true, true, true])
    // The first alone, the second and fourth together, the large one on its own.
    const xmins = (await keyRows(scope)).map((row) => row.xmin)
    expect(new Set(xmins).size).toBe(3)
    expect([xmins[1] === xmins[3], xmins[2] === xmins[1], xmins[2] === xmins[0]]).toEqual([true, false, false])
  })
})

describe('one flight of a shared transaction that PostgreSQL refuses fails alone', () => {
  it('a lost fence: that completion answers false and writes nothing; the others commit with their writes', async () => {
    const { store } = await warmedStore()
    const { scope, fences } = await claimed(store, 4)
    // The third's token is not the one that holds its claim: someone took it over.
    const flights = fences.map((fence, n) => (n === 2 ? { ...fence, fenceToken: randomUUID() } : fence))
    const ids = fences.map((fence) => `${scope}-${fence.key}`)
    expect(await outcomes(flights.map((fence, n) => completeWith(store, fence, [insertRow(ids[n] as string)])))).toEqual([true, true, false, true])
    expect(await written(ids)).toEqual([ids[0], ids[1], ids[3]])
    expect((await keyRows(scope)).map((row) => row.status)).toEqual(['completed', 'completed', 'in_progress', 'completed'])
  })

  it('a write it refuses (a duplicate id): that completion fails with the write’s 23505 and its claim stays open; the others commit', async () => {
    const { store } = await warmedStore()
    const { scope, fences } = await claimed(store, 4)
    const taken = `${scope}-taken`
    await db.pool.query('INSERT INTO flight_rows (id) VALUES ($1)', [taken])
    const ids = fences.map((fence, n) => (n === 1 ? taken : `${scope}-${fence.key}`))
    expect(await outcomes(fences.map((fence, n) => completeWith(store, fence, [insertRow(ids[n] as string)])))).toEqual([true, '23505', true, true])
    expect(await written(ids)).toEqual([ids[0], taken, ids[2], ids[3]].sort())
    expect((await keyRows(scope)).map((row) => row.status)).toEqual(['completed', 'in_progress', 'completed', 'completed'])
  })

  it('a write waiting on a row lock held elsewhere: the others commit while the lock is still held, and that one fails with its lock timeout', async () => {
    const { store } = await warmedStore(undefined, { lockTimeoutMs: 300 })
    const { scope, fences } = await claimed(store, 4)
    const locked = `${scope}-locked`
    await db.pool.query('INSERT INTO flight_rows (id) VALUES ($1)', [locked])
    const holder = await db.pool.connect()
    try {
      await holder.query('BEGIN')
      await holder.query('SELECT id FROM flight_rows WHERE id = $1 FOR UPDATE', [locked])
      const ids = fences.map((fence) => `${scope}-${fence.key}`)
      const writes = (n: number): QueryConfig[] =>
        n === 2 ? [insertRow(ids[n] as string), { text: "UPDATE flight_rows SET id = id || '-moved' WHERE id = $1", values: [locked] }] : [insertRow(ids[n] as string)]
      const completions = fences.map((fence, n) => outcomes([completeWith(store, fence, writes(n))]).then(([outcome]) => outcome))
      expect(await Promise.all([completions[0], completions[1], completions[3]])).toEqual([true, true, true])
      // Committed while the holder still holds its lock: they did not wait for it to end.
      expect(await written(ids)).toEqual([ids[0], ids[1], ids[3]])
      expect(await completions[2]).toBe('55P03')
      expect((await keyRows(scope)).map((row) => row.status)).toEqual(['completed', 'completed', 'in_progress', 'completed'])
    } finally {
      await holder.query('ROLLBACK')
      holder.release()
    }
  })
})

describe('the answer to a shared transaction lost with its connection', () => {
  it('every flight of it reads its own key back: landed, each completion returns, each write committed once', async () => {
    const proxy = await startTcpProxy(db.url)
    // One plain connection through a proxy that can drop an answer and cut the connection.
    const pool = new pg.Pool({ connectionString: proxy.url, max: 1, pipeline: false })
    pool.on('error', () => undefined)
    try {
      const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }), staleAfterMs: 60_000 })
      const scope = `lost-${randomUUID().slice(0, 8)}`
      const begin = async (key: string) => owned(await engine.begin({ scope, key, fingerprint }))
      // The flight statement prepared on the connection, so the next flights are one query each.
      await (await begin('warm')).complete(jsonResponse(201, '{}'), { statements: [insertRow(`${scope}-warm`)] })
      const executions = await Promise.all(['a', 'b', 'c'].map(begin))
      // Only the shared transaction holds b's write: the first flight (a's) passes, the answer to b's and c's is dropped.
      const cut = proxy.cutNextAnswer({ to: `${scope}-b` })
      const completions = executions.map((execution) => execution.complete(jsonResponse(201, `{"key":"${execution.key}"}`), { statements: [insertRow(`${scope}-${execution.key}`)] }))
      await Promise.all(completions)
      await cut
      expect(proxy.cuts()).toBe(1)
      expect(executions.map((execution) => execution.state)).toEqual(['completed', 'completed', 'completed'])
      expect(await written([`${scope}-a`, `${scope}-b`, `${scope}-c`])).toEqual([`${scope}-a`, `${scope}-b`, `${scope}-c`])
      const rows = (await keyRows(scope)).filter((row) => row.key !== 'warm')
      expect(rows.map((row) => row.status)).toEqual(['completed', 'completed', 'completed'])
      // b and c committed together, a before them.
      expect([rows[1]?.xmin === rows[2]?.xmin, rows[0]?.xmin === rows[1]?.xmin]).toEqual([true, false])
    } finally {
      await pool.end()
      await proxy.close()
    }
  })
})

describe('shared transactions of two processes with events of two keys in opposite orders', () => {
  it("do not deadlock: each takes both keys' ordering locks first, in one order, and commits as one transaction", async () => {
    const outbox = createOutbox({ schema: db.schema })
    const suffix = randomUUID().slice(0, 8)
    const [x, y] = [`cus-x-${suffix}`, `cus-y-${suffix}`]
    const event = async (key: string) => (await outbox.prepareEnqueue({ type: 'charge.succeeded', key, payload: { key } })).statement
    const held = [`held-a-${suffix}`, `held-b-${suffix}`]
    await db.pool.query('INSERT INTO flight_rows (id) VALUES ($1), ($2)', held)
    const touch = (id: string): QueryConfig => ({ text: 'UPDATE flight_rows SET id = id WHERE id = $1', values: [id] })
    // Two processes' stores, a connection each; the first flight of each leaves alone, the two behind it together.
    const first = await warmedStore(undefined, { lockTimeoutMs: 4000 })
    const second = await warmedStore(undefined, { lockTimeoutMs: 4000 })
    const a = await claimed(first.store, 3)
    const b = await claimed(second.store, 3)
    const holder = await db.pool.connect()
    try {
      // The write after each batch's first event waits on a row the test holds: each batch then holds
      // its first key's lock (without the ordering, x for the first, y for the second) while it waits.
      await holder.query('BEGIN')
      await holder.query('SELECT id FROM flight_rows WHERE id = ANY($1) FOR UPDATE', [held])
      // Each flight's statements made before any is sent, so the two behind the first arrive together.
      const firstFlights = [[insertRow(`${suffix}-a0`)], [await event(x), touch(held[0] as string)], [await event(y), insertRow(`${suffix}-a2`)]]
      const secondFlights = [[insertRow(`${suffix}-b0`)], [await event(y), touch(held[1] as string)], [await event(x), insertRow(`${suffix}-b2`)]]
      const firstDone = a.fences.map((fence, n) => completeWith(first.store, fence, firstFlights[n] as QueryConfig[]))
      await waiting(1)
      const secondDone = b.fences.map((fence, n) => completeWith(second.store, fence, secondFlights[n] as QueryConfig[]))
      await waiting(2)
      await holder.query('ROLLBACK')
      expect(await outcomes([...firstDone, ...secondDone])).toEqual([true, true, true, true, true, true])
    } finally {
      holder.release()
    }
    // Neither shared transaction was broken by a deadlock and run again flight by flight: each
    // committed its two flights at once.
    for (const { scope } of [a, b]) {
      const [, one, two] = (await keyRows(scope)).map((row) => row.xmin)
      expect(one).toBe(two)
    }
    const { rows } = await db.pool.query<{ ordering_key: string; n: number }>(
      `SELECT ordering_key, count(*)::int AS n FROM "${db.schema}".outbox WHERE ordering_key = ANY($1) GROUP BY ordering_key ORDER BY ordering_key`,
      [[x, y]],
    )
    expect(rows).toEqual([
      { ordering_key: x, n: 2 },
      { ordering_key: y, n: 2 },
    ])
  })
})

describe('the backend of a shared transaction terminated while it waits', () => {
  it('every flight of it fails with the connection, nothing of it commits, and each engine completes on a new one, its writes once', async () => {
    const pool = db.newPool(2, { pipeline: false })
    const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema, lockTimeoutMs: 4000 }), staleAfterMs: 60_000 })
    const scope = `terminated-${randomUUID().slice(0, 8)}`
    const begin = async (key: string) => owned(await engine.begin({ scope, key, fingerprint }))
    const held = `${scope}-held`
    await db.pool.query('INSERT INTO flight_rows (id) VALUES ($1)', [held])
    const executions = await Promise.all(['a', 'b', 'c'].map(begin))
    const holder = await db.pool.connect()
    try {
      await holder.query('BEGIN')
      await holder.query('SELECT id FROM flight_rows WHERE id = $1 FOR UPDATE', [held])
      // The first goes alone; b and c share a transaction, which waits on the held row at c's last write.
      const writes = (key: string): QueryConfig[] =>
        key === 'c' ? [insertRow(`${scope}-c`), { text: 'UPDATE flight_rows SET id = id WHERE id = $1', values: [held] }] : [insertRow(`${scope}-${key}`)]
      const completions = executions.map((execution) => execution.complete(jsonResponse(201, `{"key":"${execution.key}"}`), { statements: writes(execution.key) }))
      const [pid] = await waiting(1)
      // The waiting transaction holds b's and c's key rows (both completions ran in it), and has committed nothing.
      const free = await holder.query<{ key: string }>(`SELECT key FROM ${keyTable(db)} WHERE scope = $1 ORDER BY key FOR UPDATE SKIP LOCKED`, [scope])
      expect(free.rows.map((row) => row.key)).toEqual(['a'])
      expect(await written([`${scope}-b`, `${scope}-c`])).toEqual([])
      await db.pool.query('SELECT pg_terminate_backend($1)', [pid])
      await holder.query('ROLLBACK')
      await Promise.all(completions)
      expect(executions.map((execution) => execution.state)).toEqual(['completed', 'completed', 'completed'])
      expect(await written([`${scope}-a`, `${scope}-b`, `${scope}-c`])).toEqual([`${scope}-a`, `${scope}-b`, `${scope}-c`])
      expect((await keyRows(scope)).map((row) => row.status)).toEqual(['completed', 'completed', 'completed'])
    } finally {
      holder.release()
    }
  })
})
