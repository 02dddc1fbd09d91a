import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type WriteStatement } from '../../src/index.js'
import { createPostgresStore, withTransaction } from '../../src/store/postgres/index.js'
import { useChargesDatabase } from '../helpers/completion.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// Issue 11: `complete(response, { statements })` sends BEGIN, the fenced completion, the business
// writes and COMMIT as one flight: on a pipelining pool the whole completion is one round trip,
// and a lost fence aborts the transaction in the database, since nothing waits to decide.

const world = useChargesDatabase()
const { setup, charges, status } = world

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 3 } })

const insertCharge = (id: string): WriteStatement => ({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] })
const verbs = (statements: string[]) => statements.map((s) => s.split(/[ ;]/)[0]!)

/** Statements sent outside BEGIN … COMMIT commit one each; a transaction commits once. */
function commits(sent: string[]) {
  let inTransaction = false
  let count = 0
  for (const verb of sent) {
    if (verb === 'BEGIN') inTransaction = true
    else if (verb === 'COMMIT') inTransaction = false
    if (!inTransaction && verb !== 'ROLLBACK') count++
  }
  return count
}

async function events(id: string) {
  const { rows } = await world.db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${world.db.schema.replaceAll('"', '""')}".outbox WHERE id = $1`, [id])
  return rows[0]!.n
}

describe('complete(response, { statements }): the completion in one flight', () => {
  it('on a pipelining pool: the claim, then BEGIN, completion, charge row, event and COMMIT in one round trip', async () => {
    const { pool, engine, outbox } = setup(true)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-fresh', fingerprint }))
    const event = await outbox.prepareEnqueue({ type: 'charge.succeeded', key: 'cus_1', payload: { id: 'ch_flight' } })
    await execution.complete(jsonResponse(201, '{"id":"ch_flight"}'), { statements: [insertCharge('ch_flight'), event.statement] })
    expect(verbs(pool.statements)).toEqual(['WITH', 'BEGIN', 'WITH', 'INSERT', 'WITH', 'COMMIT'])
    expect(pool.roundTrips()).toBe(2)
    expect(execution.state).toBe('completed')
    expect({ charge: await charges('ch_flight'), event: await events(event.id), key: await status('flight-fresh') }).toEqual({ charge: 1, event: 1, key: 'completed' })
    const replay = await engine.begin({ scope: 'u1', key: 'flight-fresh', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"id":"ch_flight"}')
  })

  it("an at-most-once step's mark carrying a deferred charge, then the flight: three round trips, three commits", async () => {
    const { pool, engine, outbox } = setup(true)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-service', fingerprint }))
    const charge = await execution.step('charge', ({ providerKey }) => ({ id: `ch_${providerKey.slice(0, 8)}` }), { commit: 'with-next-write' })
    await execution.step('receipt', () => true, { delivery: 'at-most-once', commit: 'with-next-write' })
    const event = await outbox.prepareEnqueue({ type: 'charge.succeeded', key: 'cus_1', payload: charge })
    await execution.complete(jsonResponse(201, JSON.stringify(charge)), { statements: [insertCharge(charge.id), event.statement] })
    expect(verbs(pool.statements)).toEqual(['WITH', 'UPDATE', 'BEGIN', 'WITH', 'INSERT', 'WITH', 'COMMIT'])
    expect(pool.roundTrips()).toBe(3)
    // The claim and the mark commit on their own, the flight with its COMMIT.
    expect(commits(verbs(pool.statements))).toBe(3)
    expect(await charges(charge.id)).toBe(1)
  })

  it("on a connection that is not pg's own and does not pipeline (the counting wrapper): the same transaction, statement by statement", async () => {
    const { pool, engine } = setup(false)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-plain', fingerprint }))
    await execution.complete(jsonResponse(201, '{}'), { statements: [insertCharge('ch_plain')] })
    expect(verbs(pool.statements)).toEqual(['WITH', 'BEGIN', 'WITH', 'INSERT', 'COMMIT'])
    expect(pool.roundTrips()).toBe(5)
    expect({ charge: await charges('ch_plain'), key: await status('flight-plain') }).toEqual({ charge: 1, key: 'completed' })
  })

  it('fail(response, { statements }) stores the failure with its writes', async () => {
    const { engine } = setup(true)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-failed', fingerprint }))
    await execution.fail(jsonResponse(402, '{"declined":true}'), { statements: [insertCharge('ch_flight_declined')] })
    expect({ charge: await charges('ch_flight_declined'), key: await status('flight-failed'), state: execution.state }).toEqual({ charge: 1, key: 'failed', state: 'failed' })
  })

  for (const pipeline of [true, false]) {
    it(`a claim taken over meanwhile (${pipeline ? 'pipelining' : 'plain'} pool): ONCELY_LOCK_LOST, and the writes roll back`, async () => {
      const pool = world.db.newPool(2, { pipeline })
      const slow = createEngine({ store: createPostgresStore({ pool, schema: world.db.schema }), staleAfterMs: 60_000 })
      const key = `flight-lost-${pipeline}`
      const old = owned(await slow.begin({ scope: 'u1', key, fingerprint }))
      await ageClaim(world.db, 'u1', key)
      const { engine: taker } = engineOn(world.db, { staleAfterMs: 1000 })
      const held = owned(await taker.begin({ scope: 'u1', key, fingerprint }))
      expect(held.how).toBe('take-over')
      await expect(old.complete(jsonResponse(201, '{}'), { statements: [insertCharge(`ch_lost_${pipeline}`)] })).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
      expect({ charge: await charges(`ch_lost_${pipeline}`), key: await status(key), state: old.state }).toEqual({ charge: 0, key: 'in_progress', state: 'lost' })
      await held.release()
    })
  }

  it('a statement that fails rolls everything back: its own error is the cause, not the 25P02 of the statements behind it', async () => {
    const { engine, outbox } = setup(true)
    await world.db.pool.query("INSERT INTO charges (id) VALUES ('ch_flight_taken')")
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-write-fails', fingerprint }))
    const event = await outbox.prepareEnqueue({ type: 'charge.succeeded', key: 'cus_1', payload: {} })
    const error: unknown = await execution.complete(jsonResponse(201, '{}'), { statements: [insertCharge('ch_flight_taken'), event.statement] }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'ONCELY_OUTCOME_NOT_RECORDED' })
    expect((error as Error).cause).toMatchObject({ code: '23505' })
    expect({ event: await events(event.id), key: await status('flight-write-fails'), state: execution.state }).toEqual({ event: 0, key: undefined, state: 'released' })
  })

  it("a write that fails with the fence check's own SQLSTATE (22P02, invalid input) is the write's failure, not a lost claim", async () => {
    const { engine } = setup(true)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-bad-input', fingerprint }))
    const error: unknown = await execution.complete(jsonResponse(201, '{}'), { statements: [{ text: 'SELECT $1::int', values: ['not a number'] }] }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'ONCELY_OUTCOME_NOT_RECORDED' })
    expect((error as Error).cause).toMatchObject({ code: '22P02' })
    expect(await status('flight-bad-input')).toBeUndefined()
  })

  it("a completion held behind another's row lock past lock_timeout: its 55P03 is retried, and the flight lands once", async () => {
    const pool = world.db.newPool(2, { pipeline: true })
    const engine = createEngine({ store: createPostgresStore({ pool, schema: world.db.schema, lockTimeoutMs: 100 }) })
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-locked', fingerprint }))
    const holder = await world.db.pool.connect()
    try {
      await holder.query('BEGIN')
      await holder.query(`SELECT 1 FROM ${keyTable(world.db)} WHERE scope = 'u1' AND key = 'flight-locked' FOR UPDATE`)
      const completing = execution.complete(jsonResponse(201, '{}'), { statements: [insertCharge('ch_flight_locked')] })
      // Long enough for several attempts to time out on the lock (100 ms each).
      await new Promise((resolve) => setTimeout(resolve, 600))
      await holder.query('COMMIT')
      await completing
    } finally {
      holder.release()
    }
    expect({ charge: await charges('ch_flight_locked'), key: await status('flight-locked'), state: execution.state }).toEqual({ charge: 1, key: 'completed', state: 'completed' })
  })

  it('refuses statements that are not { text, values? }, and statements with tx or writes', async () => {
    const { engine } = setup(false)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-options', fingerprint }))
    const response = jsonResponse(201, '{}')
    await expect(execution.complete(response, { statements: 'INSERT' as never })).rejects.toThrow(/^option statements must be an array of \{ text, values\? \}/)
    await expect(execution.complete(response, { statements: [{ text: 1 }] as never })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    await expect(execution.complete(response, { statements: [null] as never })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    await expect(execution.complete(response, { statements: ['SELECT 1'] as never })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    await expect(execution.complete(response, { statements: [{ text: 'SELECT 1', values: 'x' }] as never })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    await expect(execution.complete(response, { statements: [{ text: 'SELECT 1', name: 3 }] as never })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    await expect(execution.complete(response, { statements: [], writes: async () => undefined })).rejects.toThrow(/^option statements must be left out with tx or writes/)
    await withTransaction(world.db.pool, async (tx) => {
      await expect(execution.complete(response, { tx, statements: [] })).rejects.toThrow(/^option statements must be left out with tx or writes/)
    })
    expect(await status('flight-options')).toBe('in_progress')
    await execution.release()
  })
})

describe('statements as they may be written', () => {
  it('a statement without values, under a name of its own, is sent and commits with the completion', async () => {
    const { engine } = setup(false)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'flight-bare', fingerprint }))
    await execution.complete(jsonResponse(201, '{}'), { statements: [{ text: "INSERT INTO charges (id) VALUES ('ch_bare')", name: 'insert_bare_charge' }] })
    expect({ charge: await charges('ch_bare'), key: await status('flight-bare') }).toEqual({ charge: 1, key: 'completed' })
  })
})

describe('a flight whose answer is lost with the connection (issue 8, path 16)', () => {
  let proxy: TcpProxy
  let pool: pg.Pool
  beforeAll(async () => {
    proxy = await startTcpProxy(world.db.url)
    pool = new pg.Pool({ connectionString: proxy.url, max: 3, pipeline: true })
    pool.on('error', () => undefined)
  })
  afterAll(async () => {
    await pool.end()
    await proxy.close()
  })

  const engine = () => createEngine({ store: createPostgresStore({ pool, schema: world.db.schema }), staleAfterMs: 60_000 })

  it('after its COMMIT: ends completed with its writes once, the landed flight read back, never sent again', async () => {
    const execution = owned(await engine().begin({ scope: 'u1', key: 'flight-cut', fingerprint }))
    // The answers are dropped from the flight on, and the connection cut once COMMIT has answered.
    const cut = proxy.cutNextAnswer({ to: 'complete_in_flight', until: 'COMMIT' })
    // A second run of this INSERT would fail on the primary key: only one run can end completed.
    await execution.complete(jsonResponse(201, '{}'), { statements: [insertCharge('ch_flight_cut')] })
    await cut
    expect({ charge: await charges('ch_flight_cut'), key: await status('flight-cut'), state: execution.state }).toEqual({ charge: 1, key: 'completed', state: 'completed' })
  })

  it('before its COMMIT: nothing landed, the flight is sent again and lands once', async () => {
    const execution = owned(await engine().begin({ scope: 'u1', key: 'flight-cut-early', fingerprint }))
    // Cut at the first answer, BEGIN's: the server loses the connection before the COMMIT.
    const cut = proxy.cutNextAnswer({ to: 'complete_in_flight' })
    await execution.complete(jsonResponse(201, '{}'), { statements: [insertCharge('ch_flight_cut_early')] })
    await cut
    expect({ charge: await charges('ch_flight_cut_early'), key: await status('flight-cut-early'), state: execution.state }).toEqual({ charge: 1, key: 'completed', state: 'completed' })
  })
})
