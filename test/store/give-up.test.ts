import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest, isOncelyError } from '../../src/index.js'
import { createOutbox } from '../../src/outbox/index.js'
import { createPostgresStore, withTransaction, type Queryable } from '../../src/store/postgres/index.js'
import { countingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { storeClaim } from '../helpers/engine.js'

// How the store gives up (issue 13, the survivors of src/store/postgres/statement-runner.ts in
// docs/mutation-report.md): a pool that never hands over a connection, a connection whose
// BEGIN, statement or ROLLBACK gets no answer, which connections go back to the pool and which
// are destroyed, and what is left running once a statement has answered.

let db: TestDatabase
let proxy: TcpProxy
beforeAll(async () => {
  db = await createTestDatabase()
  proxy = await startTcpProxy(db.url)
})
afterAll(async () => {
  await proxy.close()
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 11 } })

async function rejection(promise: Promise<unknown>): Promise<Error> {
  return promise.then(
    () => {
      throw new Error('resolved')
    },
    (error: unknown) => error as Error,
  )
}

/** Lets every callback already due run: a connection handed over resolves the pool's promise in a microtask. */
const settled = () => new Promise((resolve) => setImmediate(resolve))

/**
 * The store's timeout in the tests where a statement must be answered before the database stops
 * answering (BEGIN, or a first SELECT): long enough for a loaded machine (300 ms was missed at a
 * load average of 15), so only the statement sent after the stall is given up on.
 */
const ANSWERED_WITHIN_MS = 1500

/** A one-connection pool through the proxy, its connection opened before the database stops answering. */
async function proxiedPool(settings: pg.PoolConfig = {}): Promise<pg.Pool> {
  const pool = new pg.Pool({ connectionString: proxy.url, max: 1, idleTimeoutMillis: 0, ...settings })
  pool.on('error', () => undefined)
  await pool.query('SELECT 1')
  return pool
}

describe('nothing left running once PostgreSQL answered', () => {
  // First in the file: no pool of an earlier test has an idle timer that could run out meanwhile.
  /** Timers keeping the process alive: a timer left behind holds a script's exit for statementTimeoutMs. */
  const timers = () => process.getActiveResourcesInfo().filter((resource) => resource === 'Timeout').length

  it('a statement, a claim and a transaction that answered in time leave no timer behind, and a claim answered in time is no late insert', async () => {
    const pool = db.newPool(1, { idleTimeoutMillis: 0 })
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 60_000, lockTimeoutMs: 1000 })
    await pool.query('SELECT 1')
    const before = timers()
    expect(await store.read('u1', randomUUID())).toBeNull()
    expect(timers()).toBeLessThanOrEqual(before)
    let lateInserts = 0
    const attempt = await store.claim({ scope: 'u1', key: randomUUID(), fingerprint, ttlMs: 60_000, claimId: randomUUID(), fenceToken: randomUUID(), onLateInsert: () => lateInserts++ })
    expect(attempt.kind).toBe('inserted')
    await settled()
    expect(lateInserts).toBe(0)
    expect(timers()).toBeLessThanOrEqual(before)
    expect(await store.transaction(async (tx) => (await tx.query<{ n: number }>({ text: 'SELECT 2 AS n' })).rows[0]!.n)).toBe(2)
    expect(timers()).toBeLessThanOrEqual(before)
  })
})

describe('a pool that never hands over a connection', () => {
  it('the store gives up after statementTimeoutMs with ONCELY_STORE_UNAVAILABLE, runs none of the work, and the connection handed over late goes straight back to the pool', async () => {
    const pool = db.newPool(1, { idleTimeoutMillis: 0 })
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 200, lockTimeoutMs: 100 })
    const held = await pool.connect()
    let released = false
    let ran = false
    try {
      const error = await rejection(store.transaction(async () => void (ran = true)))
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect(error.message).toBe('PostgreSQL did not hand over a connection within 200 ms')
      expect(ran).toBe(false)
      // The store's request for a connection is still queued: the pool hands it the held one.
      expect(pool.waitingCount).toBe(1)
      held.release()
      released = true
      await settled()
      expect({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }).toEqual({ total: 1, idle: 1, waiting: 0 })
      // Nothing holds it: the next transaction gets it at once.
      expect(await store.transaction(async (tx) => (await tx.query<{ n: number }>({ text: 'SELECT 1 AS n' })).rows)).toEqual([{ n: 1 }])
    } finally {
      if (!released) held.release()
    }
  })

  it("the pool's own refusal (connectionTimeoutMillis) is ONCELY_STORE_UNAVAILABLE naming the connection, with the pool's error as its cause", async () => {
    const pool = db.newPool(1, { connectionTimeoutMillis: 10_000 })
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 20_000, lockTimeoutMs: 1000 })
    const held = await pool.connect()
    // Only once the one connection is held does the pool give up after 50 ms (pg-pool reads the
    // option at each connect): a loaded machine may take longer than that to open the first.
    ;(pool as unknown as { options: pg.PoolConfig }).options.connectionTimeoutMillis = 50
    try {
      const error = await rejection(store.transaction(async () => undefined))
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect(error.message).toBe('the connection to PostgreSQL failed during a connection')
      expect((error.cause as Error).message).toBe('timeout exceeded when trying to connect')
      expect(store.isTransientError(error)).toBe(true)
    } finally {
      held.release()
    }
  })
})

describe('a statement refused by PostgreSQL is not a lost connection', () => {
  it('its own error comes back as it is, with its SQLSTATE, and is not retried as transient', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: `missing_${randomUUID().slice(0, 8)}` })
    const error = await rejection(store.read('u1', 'no-table'))
    expect((error as { code?: string }).code).toBe('42P01')
    expect(store.isTransientError(error)).toBe(false)
  })
})

describe('a database that stops answering a transaction', () => {
  it('a plain connection whose BEGIN gets no answer (it leaves with the first statement): the work goes no further, ONCELY_STORE_UNAVAILABLE names the transaction, the connection is destroyed', async () => {
    const pool = await proxiedPool()
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 300, lockTimeoutMs: 100 })
    let ran = false
    try {
      proxy.stall()
      const error = await rejection(
        store.transaction(async (tx) => {
          await tx.query({ text: 'SELECT 1' })
          ran = true
        }),
      )
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect(error.message).toBe('the connection to PostgreSQL failed during a transaction')
      expect(ran).toBe(false)
      expect(pool.totalCount).toBe(0)
    } finally {
      proxy.restore()
      await pool.end()
    }
  })

  it('a statement that got no answer: the store gives up at once, sends no ROLLBACK behind it, and destroys the connection', async () => {
    const pool = await proxiedPool()
    const counted = countingPool(pool)
    const store = createPostgresStore({ pool: counted, schema: db.schema, statementTimeoutMs: ANSWERED_WITHIN_MS, lockTimeoutMs: 100 })
    try {
      const error = await rejection(
        store.transaction(async (tx) => {
          // BEGIN leaves with the first statement: the one that gets no answer is the second.
          await tx.query({ text: 'SELECT 0' })
          proxy.stall()
          await tx.query({ text: 'SELECT 1' })
        }),
      )
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect(error.message).toBe('the connection to PostgreSQL failed during a transaction')
      expect((error.cause as Error).message).toBe('Query read timeout')
      // A ROLLBACK would only wait behind the unanswered statement for another timeout.
      expect(counted.statements).toEqual(['BEGIN; SET', 'SELECT 0', 'SELECT 1'])
      expect(pool.totalCount).toBe(0)
    } finally {
      proxy.restore()
      await pool.end()
    }
  })

  it('a pipelining connection whose statement got no answer: the store gives up, sends no ROLLBACK behind it, and destroys the connection', async () => {
    const pool = await proxiedPool({ pipeline: true })
    const counted = countingPool(pool)
    const store = createPostgresStore({ pool: counted, schema: db.schema, statementTimeoutMs: 300, lockTimeoutMs: 100 })
    try {
      const error = await rejection(
        store.transaction(async (tx) => {
          proxy.stall()
          await tx.query({ text: 'SELECT 1' })
        }),
      )
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      // BEGIN and the statement left together, each with its own 300 ms timer. On a pipelining
      // connection node-postgres destroys the socket when the first timer (BEGIN's) fires, so the
      // statement fails with its own timeout or, when the socket closes before its timer is due,
      // with the connection's end: both are the connection failing, neither has a SQLSTATE.
      expect(['Query read timeout', 'Connection terminated unexpectedly']).toContain((error.cause as Error).message)
      // A pipelining connection would take the ROLLBACK at once, and it would wait behind the
      // unanswered statement for a second timeout before the caller heard anything.
      expect(counted.statements).toEqual(['BEGIN; SET', 'SELECT 1'])
      expect(pool.totalCount).toBe(0)
    } finally {
      proxy.restore()
      await pool.end()
    }
  })

  it('a plain connection: a statement queued behind one that got no answer is never sent, and fails at once caused by that one’s failure', async () => {
    const pool = await proxiedPool()
    const counted = countingPool(pool)
    const store = createPostgresStore({ pool: counted, schema: db.schema, statementTimeoutMs: ANSWERED_WITHIN_MS, lockTimeoutMs: 100 })
    let queued: PromiseSettledResult<unknown> | undefined
    let first: PromiseSettledResult<unknown> | undefined
    try {
      const error = await rejection(
        store.transaction(async (tx) => {
          // BEGIN leaves with the first statement, answered; the answers stop after it.
          await tx.query({ text: 'SELECT 0' })
          proxy.stall()
          // Sent without awaiting the first: the second waits for its answer, which never comes.
          ;[first, queued] = await Promise.allSettled([tx.query({ text: 'SELECT 1' }), tx.query({ text: 'SELECT 2' })])
          throw (first as PromiseRejectedResult).reason
        }),
      )
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      const firstError = (first as PromiseRejectedResult).reason as Error
      expect(firstError.message).toBe('Query read timeout')
      expect(queued?.status).toBe('rejected')
      const queuedError = (queued as PromiseRejectedResult).reason as Error
      expect(queuedError.message).toBe('not sent: the connection broke before it')
      expect(queuedError.cause).toBe(firstError)
      expect(counted.statements).toEqual(['BEGIN; SET', 'SELECT 0', 'SELECT 1'])
      expect(pool.totalCount).toBe(0)
    } finally {
      proxy.restore()
      await pool.end()
    }
  })

  it('work that fails and a ROLLBACK that gets no answer: ONCELY_STORE_UNAVAILABLE caused by the work’s error, and the connection is destroyed, never reused mid-transaction', async () => {
    const pool = await proxiedPool()
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: ANSWERED_WITHIN_MS, lockTimeoutMs: 100 })
    const refused = new Error('the handler refused')
    try {
      const error = await rejection(
        store.transaction(async (tx) => {
          await tx.query({ text: 'SELECT 1' })
          proxy.stall()
          throw refused
        }),
      )
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect(error.message).toBe('the connection to PostgreSQL failed during a transaction')
      expect(error.cause).toBe(refused)
      expect(pool.totalCount).toBe(0)
    } finally {
      proxy.restore()
      await pool.end()
    }
  })

  it('a completion in one flight that gets no answer: ONCELY_STORE_UNAVAILABLE names the transaction', async () => {
    const pool = await proxiedPool({ pipeline: true })
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 300, lockTimeoutMs: 100 })
    // The claim is made before the database stops answering, by a store that waits as long as a
    // loaded machine needs: only the completion is under test.
    const patient = createPostgresStore({ pool, schema: db.schema })
    try {
      const claimed = await storeClaim(patient, { scope: 'u1', key: randomUUID(), fingerprint })
      if (claimed.kind !== 'claimed') throw new Error('the key was not free')
      proxy.stall()
      const outcome = { status: 'completed' as const, response: { status: 201, headers: [], body: Buffer.from('{}') } }
      const error = await rejection(store.complete({ scope: 'u1', key: claimed.claim.key, fenceToken: claimed.claim.fenceToken }, { ...outcome, statements: [] }))
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect(error.message).toBe('the connection to PostgreSQL failed during a transaction')
      expect(pool.totalCount).toBe(0)
    } finally {
      proxy.restore()
      await pool.end()
    }
  })
})

describe('connections given back', () => {
  it('a transaction that committed gives its connection back for reuse: the next one runs on the same backend', async () => {
    const pool = db.newPool(1, { idleTimeoutMillis: 0 })
    const store = createPostgresStore({ pool, schema: db.schema })
    const backend = () => store.transaction(async (tx) => (await tx.query<{ pid: number }>({ text: 'SELECT pg_backend_pid() AS pid' })).rows[0]!.pid)
    const first = await backend()
    expect({ total: pool.totalCount, idle: pool.idleCount }).toEqual({ total: 1, idle: 1 })
    expect(await backend()).toBe(first)
  })

  it("withTransaction's connection, once back in the pool, is no longer taken for an open transaction: the outbox refuses it in autocommit", async () => {
    const pool = db.newPool(1)
    const outbox = createOutbox({ schema: db.schema, notify: false })
    const type = `autocommit.${randomUUID().slice(0, 8)}`
    let inside: Queryable | undefined
    await withTransaction(pool, async (tx) => {
      inside = tx
      await outbox.enqueue(tx, { type, payload: { n: 1 } })
    })
    const client = await pool.connect()
    try {
      // The same connection, now outside any transaction.
      expect(client).toBe(inside)
      const error = await rejection(outbox.enqueue(client, { type, payload: { n: 2 } }))
      expect(isOncelyError(error, 'ONCELY_NOT_IN_TRANSACTION')).toBe(true)
    } finally {
      client.release()
    }
    const { rows } = await db.pool.query(`SELECT payload FROM "${db.schema.replaceAll('"', '""')}".outbox WHERE type = $1`, [type])
    expect(rows).toHaveLength(1)
  })
})
