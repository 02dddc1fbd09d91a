import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type Engine } from '../../src/index.js'
import { createPostgresStore, type PoolLike, type Queryable, type QueryConfig, type QueryResult } from '../../src/store/postgres/index.js'
import { countingPool, type CountingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, jsonResponse, keyTable, owned, storeClaim } from '../helpers/engine.js'

// engine.inspect (issue 23): what support tools see of one operation, read from the record in
// one round trip, and never a decision: inspecting changes nothing.

let db: TestDatabase
let pool: CountingPool
let engine: Engine<Queryable>
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })
beforeAll(async () => {
  db = await createTestDatabase()
  pool = countingPool(db.pool)
  engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }), staleAfterMs: 30_000 })
})
afterAll(async () => {
  await db.close()
})

/** `engine.inspect`, counting its round trips. */
async function inspect(scope: string | number, key: string) {
  pool.reset()
  const record = await engine.inspect({ scope, key })
  expect(pool.roundTrips()).toBe(1)
  return record
}

describe('engine.inspect', () => {
  it('answers null for a key never used, another scope, and a key no request could send, and creates nothing', async () => {
    const key = randomUUID()
    expect(await inspect('u1', key)).toBeNull()
    owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    expect(await inspect('u2', key)).toBeNull()
    pool.reset()
    expect(await engine.inspect({ scope: 'u1', key: 'k'.repeat(256) })).toBeNull()
    expect(pool.roundTrips()).toBe(0)
  })

  it('shows a running claim with its committed steps, then the completed outcome with its stored response, the key quoted or not', async () => {
    const key = randomUUID()
    const execution = owned(await engine.begin({ scope: 42, key, fingerprint }))
    await execution.step('charge', () => ({ id: 'ch_1' }))
    expect(await inspect('42', key)).toMatchObject({
      scope: '42',
      key,
      state: 'running',
      stale: false,
      expired: false,
      claimId: execution.claimId,
      recoveryPoint: 'charge',
      steps: { charge: { id: 'ch_1' } },
      response: null,
    })
    await execution.complete(jsonResponse(201, '{"id":"ch_1"}'))
    const done = await inspect(42, `"${key}"`)
    expect(done).toMatchObject({ state: 'completed', expired: false, steps: { charge: { id: 'ch_1' } } })
    expect(done?.response?.status).toBe(201)
    expect(Buffer.from(done?.response?.body ?? []).toString()).toBe('{"id":"ch_1"}')
    expect(done?.expiresInMs).toBeGreaterThan(0)
  })

  it('shows a suspended claim, a stale one, and inspecting one changes nothing: the next request still takes it over', async () => {
    const suspendedKey = randomUUID()
    const suspended = owned(await engine.begin({ scope: 'u3', key: suspendedKey, fingerprint }))
    await suspended.step('charge', () => ({ id: 'ch_s' }))
    await suspended.suspend()
    expect(await inspect('u3', suspendedKey)).toMatchObject({ state: 'suspended', interrupted: true, stale: false })

    const staleKey = randomUUID()
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    await storeClaim(store, { scope: 'u3', key: staleKey, fingerprint })
    await ageClaim(db, 'u3', staleKey)
    expect(await inspect('u3', staleKey)).toMatchObject({ state: 'running', stale: true })
    const { rows } = await db.pool.query<{ status: string }>(`SELECT status FROM ${keyTable(db)} WHERE scope = 'u3' AND key = $1`, [staleKey])
    expect(rows).toEqual([{ status: 'in_progress' }])
    expect((await engine.begin({ scope: 'u3', key: staleKey, fingerprint })).kind).toBe('execute')
  })

  it('says a settled key past its TTL is expired', async () => {
    const key = randomUUID()
    const execution = owned(await engine.begin({ scope: 'u4', key, fingerprint }))
    await execution.fail(jsonResponse(402, '{"declined":true}'))
    await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 second' WHERE scope = 'u4' AND key = $1`, [key])
    expect(await inspect('u4', key)).toMatchObject({ state: 'failed', expired: true })
  })

  it('calls only a running claim stale, and neither a running nor a suspended claim expired, however old', async () => {
    const past = (key: string) =>
      db.pool.query(`UPDATE ${keyTable(db)} SET locked_at = now() - interval '1 hour', expires_at = now() - interval '1 second' WHERE scope = 'u5' AND key = $1`, [key])
    const doneKey = randomUUID()
    const done = owned(await engine.begin({ scope: 'u5', key: doneKey, fingerprint }))
    await done.complete(jsonResponse(201, '{}'))
    await past(doneKey)
    expect(await inspect('u5', doneKey)).toMatchObject({ state: 'completed', stale: false, expired: true })

    const runningKey = randomUUID()
    await storeClaim(createPostgresStore({ pool: db.pool, schema: db.schema }), { scope: 'u5', key: runningKey, fingerprint })
    await past(runningKey)
    expect(await inspect('u5', runningKey)).toMatchObject({ state: 'running', stale: true, expired: false })

    const suspendedKey = randomUUID()
    const suspended = owned(await engine.begin({ scope: 'u5', key: suspendedKey, fingerprint }))
    await suspended.suspend()
    await past(suspendedKey)
    expect(await inspect('u5', suspendedKey)).toMatchObject({ state: 'suspended', stale: false, expired: false })
  })

  it('calls a lease exactly staleAfterMs old stale, and a settled key exactly at its expiry expired, as a retry would take it', async () => {
    // The times are the database's at the read (now() - locked_at, expires_at - now()). Read on
    // one connection inside one transaction, now() is that transaction's start for every
    // statement, so a row written at now() minus staleAfterMs reads back exactly that old.
    const runningKey = randomUUID()
    const settledKey = randomUUID()
    await storeClaim(createPostgresStore({ pool: db.pool, schema: db.schema }), { scope: 'u6', key: runningKey, fingerprint })
    await owned(await engine.begin({ scope: 'u6', key: settledKey, fingerprint })).complete(jsonResponse(201, '{}'))
    const client = await db.pool.connect()
    try {
      await client.query('BEGIN')
      await client.query(`UPDATE ${keyTable(db)} SET locked_at = now() - interval '30000 milliseconds' WHERE scope = 'u6' AND key = $1`, [runningKey])
      await client.query(`UPDATE ${keyTable(db)} SET expires_at = now() WHERE scope = 'u6' AND key = $1`, [settledKey])
      const inTransaction: PoolLike = {
        async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
          const result: QueryResult<unknown> = await client.query(config)
          return result as QueryResult<R>
        },
        connect: () => Promise.reject(new Error('inspect reads through query() alone')),
      }
      const reader = createEngine({ store: createPostgresStore({ pool: inTransaction, schema: db.schema, listen: false }), staleAfterMs: 30_000 })
      expect(await reader.inspect({ scope: 'u6', key: runningKey })).toMatchObject({ state: 'running', leaseAgeMs: 30_000, stale: true })
      const settled = await reader.inspect({ scope: 'u6', key: settledKey })
      expect(settled).toMatchObject({ state: 'completed', expired: true })
      expect(Math.abs(settled?.expiresInMs ?? NaN)).toBe(0)
    } finally {
      await client.query('ROLLBACK')
      client.release()
    }
  })
})
