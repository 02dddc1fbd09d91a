import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { createPostgresStore, SQLSTATE, type PostgresStore } from '../../src/store/postgres/index.js'
import { quoteSchema } from '../../src/store/postgres/schema-name.js'
import { buildStatements } from '../../src/store/postgres/statements.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { keyTable, storeClaim } from '../helpers/engine.js'

// What the store writes and counts (issue 13, the survivors of src/store/postgres/store.ts in
// docs/mutation-report.md): the sweep and the stale count's threshold, a flight's write without
// values, a flight's lost fence told by its SQLSTATE and not by its message (issue 24), and
// options that are not an object. A step's result and a suspension's error as stored are cases of
// the port's conformance table (test/store/conformance.ts).

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 13 } })
const table = () => keyTable(db)

async function claimed(store: PostgresStore, scope: string) {
  const key = randomUUID()
  const attempt = await storeClaim(store, { scope, key, fingerprint })
  if (attempt.kind !== 'claimed') throw new Error('the key was not free')
  return { scope, key, fenceToken: attempt.claim.fenceToken }
}

describe('createPostgresStore', () => {
  it('called without options: refused by name, not a TypeError from inside', () => {
    for (const options of [undefined, 'postgres://localhost/app']) {
      let error: unknown
      try {
        createPostgresStore(options as never)
      } catch (caught) {
        error = caught
      }
      expect(error).toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
      expect((error as Error).message).toMatch(/^option options must be an object \{ pool, schema\? \}; got /)
    }
  })
})

describe('the sweep and the stale count', () => {
  it('sweepExpired deletes at most its batch of expired settled keys, and only those', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const scope = `sweep-${randomUUID().slice(0, 8)}`
    const outcome = { status: 'completed' as const, response: { status: 200, headers: [], body: Buffer.from('{}') } }
    const settled = async () => {
      const fence = await claimed(store, scope)
      expect(await store.complete(fence, outcome)).toBe(true)
      return fence.key
    }
    const expired = [await settled(), await settled(), await settled()]
    const fresh = await settled()
    const running = (await claimed(store, scope)).key
    await db.pool.query(`UPDATE ${table()} SET expires_at = now() - interval '1 hour' WHERE scope = $1 AND key = ANY($2)`, [scope, [...expired, running]])
    // This file's database holds no other expired settled key: a batch of two, then the last, then none.
    expect([await store.sweepExpired(2), await store.sweepExpired(2), await store.sweepExpired(2)]).toEqual([2, 1, 0])
    const { rows } = await db.pool.query<{ key: string }>(`SELECT key FROM ${table()} WHERE scope = $1`, [scope])
    expect(rows.map((row) => row.key).sort()).toEqual([fresh, running].sort())
  })

  it('countStaleClaims counts in_progress claims whose lease is older than the threshold', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const scope = `stale-${randomUUID().slice(0, 8)}`
    const stale = randomUUID()
    for (const key of [stale, randomUUID()]) await storeClaim(store, { scope, key, fingerprint })
    const before = await store.countStaleClaims(3_000_000)
    await db.pool.query(`UPDATE ${table()} SET locked_at = now() - interval '1 hour' WHERE scope = $1 AND key = $2`, [scope, stale])
    expect(await store.countStaleClaims(3_000_000)).toBe(before + 1)
  })
})

describe('a completion in one flight', () => {
  it('a write given without values is sent with none, and lands with the completion', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const fence = await claimed(store, 'no-values')
    const outcome = { status: 'completed' as const, response: { status: 201, headers: [], body: Buffer.from('{}') } }
    await db.pool.query('CREATE TABLE IF NOT EXISTS valueless (at timestamptz NOT NULL)')
    expect(await store.complete(fence, { ...outcome, statements: [{ text: 'INSERT INTO valueless (at) VALUES (now())' }] })).toBe(true)
    expect((await store.read(fence.scope, fence.key))?.status).toBe('completed')
    expect((await db.pool.query('SELECT 1 FROM valueless')).rowCount).toBe(1)
  })

  it("a lost fence fails the flight's completion with oncely's SQLSTATE (ON001), and the store answers false: the writes roll back", async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const fence = await claimed(store, 'fence-lost')
    const lost = { ...fence, fenceToken: randomUUID() }
    const outcome = { status: 'completed' as const, response: { status: 201, headers: [], body: Buffer.from('{}') } }
    const { completeInFlight } = buildStatements(quoteSchema(db.schema), undefined)
    const error: unknown = await db.pool.query({ text: completeInFlight.text, values: [lost.scope, lost.key, lost.fenceToken, 'completed', 201, '[]', Buffer.from('{}'), 'oncely_keys_test'] }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: SQLSTATE.fenceLost })
    expect(SQLSTATE.fenceLost).toBe('ON001')
    await db.pool.query('CREATE TABLE IF NOT EXISTS fence_lost_writes (at timestamptz NOT NULL)')
    expect(await store.complete(lost, { ...outcome, statements: [{ text: 'INSERT INTO fence_lost_writes (at) VALUES (now())' }] })).toBe(false)
    expect((await db.pool.query('SELECT 1 FROM fence_lost_writes')).rowCount).toBe(0)
    expect((await store.read(fence.scope, fence.key))?.status).toBe('in_progress')
  })

  it("a write failing with 22P02 whose message quotes the old lost-fence text is the write's failure, not a lost claim", async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const fence = await claimed(store, 'marker-quoted')
    const outcome = { status: 'completed' as const, response: { status: 201, headers: [], body: Buffer.from('{}') } }
    // Before issue 24 a lost fence was a 22P02 naming this text, and the store matched the message.
    const oldMarker = 'oncely: the claim was lost before its completion'
    const error: unknown = await store.complete(fence, { ...outcome, statements: [{ text: 'SELECT $1::boolean', values: [`${oldMarker}: 0 rows hold the fence`] }] }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: '22P02' })
    expect((error as Error).message).toContain(oldMarker)
    expect((await store.read(fence.scope, fence.key))?.status).toBe('in_progress')
  })
})

describe('a reclaim and a statement in the store’s transaction', () => {
  it('an expired settled key reclaimed with a stale threshold records that threshold on the new claim', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const fence = await claimed(store, 'reclaim-threshold')
    const outcome = { status: 'completed' as const, response: { status: 200, headers: [], body: Buffer.from('{}') } }
    expect(await store.complete(fence, outcome)).toBe(true)
    await db.pool.query(`UPDATE ${table()} SET expires_at = now() - interval '1 hour' WHERE scope = $1 AND key = $2`, [fence.scope, fence.key])
    const seen = await store.read(fence.scope, fence.key)
    if (seen === null) throw new Error('the row is gone')
    const reclaimed = await store.reclaimExpired(seen, { fingerprint, ttlMs: 60_000, claimId: randomUUID(), fenceToken: randomUUID(), staleAfterMs: 45_000 })
    expect(reclaimed).not.toBeNull()
    // A take-over later waits for the greater of its own threshold and this one (issue 22).
    expect((await store.read(fence.scope, fence.key))?.staleAfterMs).toBe(45_000)
  })

  it('runStatement sends a write on the transaction it is given, which commits with it', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    await db.pool.query('CREATE TABLE IF NOT EXISTS run_statement_writes (id text PRIMARY KEY)')
    const id = randomUUID()
    await store.transaction(async (tx) => store.runStatement!(tx, { text: 'INSERT INTO run_statement_writes (id) VALUES ($1)', values: [id] }))
    expect((await db.pool.query('SELECT 1 FROM run_statement_writes WHERE id = $1', [id])).rowCount).toBe(1)
  })
})
