import { describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import { createOutbox } from '../../src/outbox/index.js'
import { createPostgresStore, withTransaction, type Queryable } from '../../src/store/postgres/index.js'
import { countingPool } from '../helpers/counting-pool.js'
import { useChargesDatabase } from '../helpers/completion.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// Issue 11: the completion with `writes` sends the fenced completion, the business rows and the
// outbox rows together; on a pipelining pool that is one round trip before the COMMIT.

const world = useChargesDatabase()
const { setup, charges, status } = world

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })

const insertCharge = (tx: Queryable, id: string) => tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] })

describe('complete(response, { writes })', () => {
  it('on a pipelining pool: the claim, then BEGIN, completion, charge row and event in one round trip, then the COMMIT', async () => {
    const { pool, engine, outbox } = setup(true)
    // The first enqueue of a process loads @opentelemetry/api (lazily, for the traceparent): a
    // one-time wait that would split the flight. Steady state is what the budget counts.
    await withTransaction(world.db.pool, (tx) => outbox.enqueue(tx, { type: 'warm-up', key: 'cus_0', payload: {} }))
    const execution = owned(await engine.begin({ scope: 'u1', key: 'pipe-fresh', fingerprint }))
    await execution.complete(jsonResponse(201, '{"id":"ch_pipe"}'), {
      writes: async (tx) => {
        await Promise.all([insertCharge(tx, 'ch_pipe'), outbox.enqueue(tx, { type: 'charge.succeeded', key: 'cus_1', payload: { id: 'ch_pipe' } })])
      },
    })
    // The outbox trusts the store's own transaction: no SAVEPOINT is sent to ask.
    expect(pool.statements.map((s) => s.split(/[ ;]/)[0])).toEqual(['WITH', 'BEGIN', 'UPDATE', 'INSERT', 'WITH', 'COMMIT'])
    expect(pool.roundTrips()).toBe(3)
    expect(await charges('ch_pipe')).toBe(1)
    expect(await status('pipe-fresh')).toBe('completed')
    const replay = await engine.begin({ scope: 'u1', key: 'pipe-fresh', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"id":"ch_pipe"}')
  })

  it("with writes as a function: claim, an at-most-once step's mark carrying a deferred charge, the completion's flight, its COMMIT: four round trips, three commits", async () => {
    const { pool, engine, outbox } = setup(true)
    await withTransaction(world.db.pool, (tx) => outbox.enqueue(tx, { type: 'warm-up', key: 'cus_0', payload: {} }))
    const execution = owned(await engine.begin({ scope: 'u1', key: 'pipe-service', fingerprint }))
    const charge = await execution.step('charge', ({ providerKey }) => ({ id: `ch_${providerKey.slice(0, 6)}` }), { commit: 'with-next-write' })
    await execution.step('receipt', () => true, { delivery: 'at-most-once', commit: 'with-next-write' })
    await execution.complete(jsonResponse(201, JSON.stringify(charge)), {
      writes: async (tx) => {
        await Promise.all([insertCharge(tx, charge.id), outbox.enqueue(tx, { type: 'charge.succeeded', key: 'cus_1', payload: charge })])
      },
    })
    expect(pool.statements.map((s) => s.split(/[ ;]/)[0])).toEqual(['WITH', 'UPDATE', 'BEGIN', 'UPDATE', 'INSERT', 'WITH', 'COMMIT'])
    expect(pool.roundTrips()).toBe(4)
    expect(await charges(charge.id)).toBe(1)
  })

  it('without pipelining: the same statements, each its own round trip', async () => {
    const { pool, engine } = setup(false)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'plain-fresh', fingerprint }))
    await execution.complete(jsonResponse(201, '{}'), { writes: async (tx) => void (await insertCharge(tx, 'ch_plain')) })
    expect(pool.statements.map((s) => s.split(/[ ;]/)[0])).toEqual(['WITH', 'BEGIN', 'UPDATE', 'INSERT', 'COMMIT'])
    expect(pool.roundTrips()).toBe(5)
    expect(await charges('ch_plain')).toBe(1)
  })

  it('fail(response, { writes }) stores the failure with its writes', async () => {
    const { engine } = setup(true)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'pipe-failed', fingerprint }))
    await execution.fail(jsonResponse(402, '{"declined":true}'), { writes: async (tx) => void (await insertCharge(tx, 'ch_declined')) })
    expect(await status('pipe-failed')).toBe('failed')
    expect(await charges('ch_declined')).toBe(1)
  })

  it('a claim taken over meanwhile: ONCELY_LOCK_LOST, and the writes sent behind the completion roll back', async () => {
    const { engine: slow } = engineOn(world.db, { staleAfterMs: 60_000 })
    const old = owned(await slow.begin({ scope: 'u1', key: 'pipe-lost', fingerprint }))
    await ageClaim(world.db, 'u1', 'pipe-lost')
    const taker = owned(await createEngine({ store: createPostgresStore({ pool: world.db.pool, schema: world.db.schema }), staleAfterMs: 1000 }).begin({ scope: 'u1', key: 'pipe-lost', fingerprint }))
    expect(taker.how).toBe('take-over')
    await expect(old.complete(jsonResponse(201, '{}'), { writes: async (tx) => void (await insertCharge(tx, 'ch_lost')) })).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    expect(await charges('ch_lost')).toBe(0)
    expect(await status('pipe-lost')).toBe('in_progress')
    await taker.release()
  })

  it('a write that fails rolls the completion back: ONCELY_OUTCOME_NOT_RECORDED with the cause, the claim released (no step ran)', async () => {
    const { engine } = setup(true)
    await world.db.pool.query("INSERT INTO charges (id) VALUES ('ch_taken')")
    const execution = owned(await engine.begin({ scope: 'u1', key: 'pipe-write-fails', fingerprint }))
    const error: unknown = await execution.complete(jsonResponse(201, '{}'), { writes: async (tx) => void (await insertCharge(tx, 'ch_taken')) }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'ONCELY_OUTCOME_NOT_RECORDED' })
    expect((error as Error).cause).toMatchObject({ code: '23505' })
    expect(await status('pipe-write-fails')).toBeUndefined()
    expect(execution.state).toBe('released')
  })

  it("a completion held behind another's row lock past lock_timeout: its 55P03, not the writes' 25P02, is thrown, so the transaction is retried and lands once", async () => {
    const pool = world.db.newPool(4, { pipeline: true })
    const engine = createEngine({ store: createPostgresStore({ pool, schema: world.db.schema, lockTimeoutMs: 100 }) })
    const execution = owned(await engine.begin({ scope: 'u1', key: 'pipe-locked', fingerprint }))
    const holder = await world.db.pool.connect()
    try {
      await holder.query('BEGIN')
      await holder.query(`SELECT 1 FROM ${keyTable(world.db)} WHERE scope = 'u1' AND key = 'pipe-locked' FOR UPDATE`)
      const completing = execution.complete(jsonResponse(201, '{}'), { writes: async (tx) => void (await insertCharge(tx, 'ch_locked')) })
      // Long enough for several attempts to time out on the lock (100 ms each).
      await new Promise((resolve) => setTimeout(resolve, 600))
      await holder.query('COMMIT')
      await completing
    } finally {
      holder.release()
    }
    expect(execution.state).toBe('completed')
    expect(await status('pipe-locked')).toBe('completed')
    expect(await charges('ch_locked')).toBe(1)
  })

  it('refuses tx and writes together, and writes that is not a function', async () => {
    const { engine } = setup(false)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'pipe-options', fingerprint }))
    await withTransaction(world.db.pool, async (tx) => {
      await expect(execution.complete(jsonResponse(201, '{}'), { tx, writes: async () => undefined })).rejects.toThrow(/^option writes must be left out with tx/)
    })
    await expect(execution.complete(jsonResponse(201, '{}'), { writes: 'INSERT' as never })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    expect(await status('pipe-options')).toBe('in_progress')
    await execution.release()
  })
})

describe('the outbox in a transaction the store did not open', () => {
  it('still asks with a SAVEPOINT, and refuses a pool outside a transaction', async () => {
    const pool = countingPool(world.db.newPool(2))
    const outbox = createOutbox({ schema: world.db.schema, notify: false })
    const client = await pool.connect()
    try {
      await client.query({ text: 'BEGIN' })
      await outbox.enqueue(client, { type: 'x', key: 'k', payload: {} })
      await client.query({ text: 'ROLLBACK' })
    } finally {
      client.release()
    }
    expect(pool.statements.map((s) => s.split(/[ ;]/)[0])).toContain('SAVEPOINT')
    await expect(outbox.enqueue(pool, { type: 'x', key: 'k', payload: {} })).rejects.toMatchObject({ code: 'ONCELY_NOT_IN_TRANSACTION' })
  })
})
