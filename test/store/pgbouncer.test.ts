import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, type WriteStatement } from '../../src/index.js'
import { createOutbox, createRelay } from '../../src/outbox/index.js'
import { createPostgresStore, sqlState, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, jsonResponse, keyTable, owned, storeClaim } from '../helpers/engine.js'
import { recordingPublisher } from '../outbox/support/recording-publisher.js'
import { PGBOUNCER, startPgBouncer, type PgBouncer } from './support/pgbouncer.js'

// Issue 24, point 6 (docs/scale-out.md): the engine, the store and the relay behind PgBouncer in
// transaction mode, which hands each transaction whichever server connection is free. With one
// server connection shared by every client, whatever a client left on it (a named statement)
// the next client finds. Skipped with a message where PgBouncer is not installed; never under
// CI=true, where .ci/run installs it.
const runs = PGBOUNCER !== undefined || process.env.CI === 'true'
if (!runs) console.warn('pgbouncer test skipped: no pgbouncer in /usr/sbin (apt-get install -y pgbouncer)')

describe.runIf(runs)('behind PgBouncer in transaction mode', () => {
  let db: TestDatabase
  let bouncer: PgBouncer
  const pools: pg.Pool[] = []
  const poolOn = (max: number) => {
    const pool = new pg.Pool({ connectionString: bouncer.url, max })
    pools.push(pool)
    return pool
  }

  beforeAll(async () => {
    if (PGBOUNCER === undefined) throw new Error('pgbouncer is not installed; under CI=true this test must run (.ci/run installs it)')
    db = await createTestDatabase()
    await db.pool.query('CREATE TABLE charges (id text PRIMARY KEY, user_id text NOT NULL)')
    bouncer = await startPgBouncer(db.url)
  })
  afterAll(async () => {
    await Promise.all(pools.map((pool) => pool.end()))
    await bouncer?.stop()
    await db?.close()
  })

  it('is really pooling by transaction: a statement one client named is found by another, so named statements collide (42P05)', async () => {
    const [a, b] = [poolOn(1), poolOn(1)]
    await a.query({ name: 'pgbouncer_probe', text: 'SELECT 1' })
    const failure = await b.query({ name: 'pgbouncer_probe', text: 'SELECT 1' }).then(() => undefined, (error: unknown) => error)
    expect(sqlState(failure)).toBe('42P05')
  })

  it('with preparedStatements: false, concurrent claims of one key across clients: one executes, the rest conflict, then replay', async () => {
    const engines = [poolOn(2), poolOn(2)].map((pool) => createEngine({ store: createPostgresStore({ pool, schema: db.schema, preparedStatements: false }) }))
    const decisions = await Promise.all(Array.from({ length: 20 }, (_, i) => engines[i % 2]!.begin({ scope: 'ub', key: 'bounce-1', fingerprint: 'fp' })))
    const executing = decisions.filter((decision) => decision.kind === 'execute')
    expect(executing).toHaveLength(1)
    expect(decisions.filter((decision) => decision.kind !== 'execute').map((decision) => decision.kind)).toEqual(Array(19).fill('conflict'))
    const charge: WriteStatement = { text: 'INSERT INTO charges (id, user_id) VALUES ($1, $2)', values: ['ch_bounce_1', 'ub'] }
    // The completion flight: BEGIN, the fenced completion, the charge and COMMIT sent together.
    await owned(executing[0]!).complete(jsonResponse(201, '{"id":"ch_bounce_1"}'), { statements: [charge] })
    for (const engine of engines) {
      const replay = await engine.begin({ scope: 'ub', key: 'bounce-1', fingerprint: 'fp' })
      expect(replay.kind).toBe('replay')
      if (replay.kind === 'replay') expect(Buffer.from(replay.response.body).toString()).toBe('{"id":"ch_bounce_1"}')
    }
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::integer AS n FROM charges WHERE id = 'ch_bounce_1'`)
    expect(rows[0]!.n).toBe(1)
  })

  it('with preparedStatements: false, an abandoned claim is taken over through another client and completed in a transaction', async () => {
    const store = createPostgresStore({ pool: poolOn(2), schema: db.schema, preparedStatements: false })
    const dead = await storeClaim(store, { scope: 'ub', key: 'bounce-2', fingerprint: 'fp' })
    expect(dead.kind).toBe('claimed')
    await ageClaim(db, 'ub', 'bounce-2')
    const engine = createEngine({ store: createPostgresStore({ pool: poolOn(2), schema: db.schema, preparedStatements: false }), staleAfterMs: 60_000 })
    const execution = owned(await engine.begin({ scope: 'ub', key: 'bounce-2', fingerprint: 'fp' }))
    expect(execution.how).toBe('take-over')
    await execution.complete(jsonResponse(201, '{"id":"ch_bounce_2"}'), {
      writes: async (tx) => {
        await tx.query({ text: 'INSERT INTO charges (id, user_id) VALUES ($1, $2)', values: ['ch_bounce_2', 'ub'] })
      },
    })
    const { rows } = await db.pool.query<{ status: string; interrupted: boolean }>(`SELECT status, interrupted FROM ${keyTable(db)} WHERE scope = 'ub' AND key = 'bounce-2'`)
    expect(rows).toEqual([{ status: 'completed', interrupted: true }])
  })

  it('with preparedStatements: false, completeInTransaction: BEGIN leaves with the first write and the completion with the COMMIT; a lost fence rolls the write back', async () => {
    const engine = createEngine({ store: createPostgresStore({ pool: poolOn(2), schema: db.schema, preparedStatements: false }) })
    const charge = (id: string) => async (tx: Queryable) => {
      await tx.query({ text: 'INSERT INTO charges (id, user_id) VALUES ($1, $2)', values: [id, 'ub'] })
      return { response: jsonResponse(201, `{"id":"${id}"}`), value: id }
    }
    const execution = owned(await engine.begin({ scope: 'ub', key: 'bounce-3', fingerprint: 'fp' }))
    await expect(execution.completeInTransaction(charge('ch_bounce_3'))).resolves.toBe('ch_bounce_3')
    const lost = owned(await engine.begin({ scope: 'ub', key: 'bounce-4', fingerprint: 'fp' }))
    await db.pool.query(`UPDATE ${keyTable(db)} SET fence_token = gen_random_uuid() WHERE scope = 'ub' AND key = 'bounce-4'`)
    await expect(lost.completeInTransaction(charge('ch_bounce_4'))).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    const { rows } = await db.pool.query<{ id: string }>(`SELECT id FROM charges WHERE id IN ('ch_bounce_3', 'ch_bounce_4') ORDER BY id`)
    expect(rows).toEqual([{ id: 'ch_bounce_3' }])
    const replay = await engine.begin({ scope: 'ub', key: 'bounce-3', fingerprint: 'fp' })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"id":"ch_bounce_3"}')
  })

  it('the outbox and two relays (listen: false, preparedStatements: false) publish every event once', async () => {
    const outbox = createOutbox({ schema: db.schema, notify: false, preparedStatements: false })
    const store = createPostgresStore({ pool: poolOn(2), schema: db.schema, preparedStatements: false })
    const ids = await store.transaction(async (tx) => {
      const written: string[] = []
      for (let n = 0; n < 4; n++) written.push((await outbox.enqueue(tx, { type: 'bounce.event', key: `k${n % 2}`, payload: { n } })).id)
      return written
    })
    const publisher = recordingPublisher()
    // Two relays on clients of their own, sharing PgBouncer's one server connection.
    const relays = [poolOn(1), poolOn(1)].map((pool) =>
      createRelay({ pool, schema: db.schema, publisher, listen: false, preparedStatements: false, batchSize: 1, log: () => undefined }),
    )
    let published = 0
    for (let round = 0; published < ids.length && round < 20; round++) {
      for (const relay of relays) published += (await relay.runOnce()).published
    }
    expect(publisher.messages.map((message) => message.id).sort()).toEqual([...ids].sort())
  })

  it.runIf(PGBOUNCER !== undefined)('with preparedStatements on: runs where PgBouncer tracks prepared statements (1.21 and later), else says why not', async (context) => {
    if (bouncer.version[0] === 1 && bouncer.version[1] < 21) {
      console.warn(`pgbouncer ${bouncer.version.join('.')}: no max_prepared_statements before 1.21; the prepared-statements pass is skipped`)
      context.skip()
    }
    const tracking = await startPgBouncer(db.url, { max_prepared_statements: 100 })
    try {
      const engines = [1, 2].map(() => {
        const pool = new pg.Pool({ connectionString: tracking.url, max: 1 })
        pools.push(pool)
        return createEngine({ store: createPostgresStore({ pool, schema: db.schema }) })
      })
      const decisions = await Promise.all(engines.map((engine) => engine.begin({ scope: 'ub', key: 'bounce-prepared', fingerprint: 'fp' })))
      expect(decisions.map((decision) => decision.kind).sort()).toEqual(['conflict', 'execute'])
    } finally {
      await tracking.stop()
    }
  })
})
