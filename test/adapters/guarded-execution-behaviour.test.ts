import { randomUUID } from 'node:crypto'
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { GuardedExecution, resolveAdapterOptions, type AdapterOptions, type CapturedResponse, type HttpAnswer, type OutcomeEvent } from '../../src/adapters/http.js'
import { createEngine, fingerprintRequest, type Engine, type EngineOptions, type Execution, type StoredResponse } from '../../src/index.js'
import type { LogFields } from '../../src/logger.js'
import { createPostgresStore, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import type { Fence, StoreCompletion } from '../../src/engine/store.js'
import { countingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { ageClaim, engineOn, keyTable, owned } from '../helpers/engine.js'
import { startTcpProxy } from '../helpers/tcp-proxy.js'

// The completion rule of docs/adapters.md, driven through GuardedExecution itself: what a
// captured response becomes in the database, on the wire, in `onOutcome` and in the log.

let db: TestDatabase
let engine: Engine<Queryable>
beforeAll(async () => {
  db = await createTestDatabase()
  engine = engineOn(db, { staleAfterMs: 30_000 }).engine
  await db.pool.query('CREATE TABLE guarded_charges (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

interface Line {
  level: 'info' | 'warn' | 'error'
  fields: LogFields
  message: string
}

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })
const ROUTE = { route: 'POST /v1/charges' }

/** Adapter options on `on`, with the log lines and the outcome events kept for the assertions. */
function adapter(on: Engine<Queryable> = engine, extra: Partial<AdapterOptions<never, Queryable>> = {}) {
  const lines: Line[] = []
  const events: OutcomeEvent[] = []
  const log = {
    info: (fields: LogFields, message: string) => void lines.push({ level: 'info', fields, message }),
    warn: (fields: LogFields, message: string) => void lines.push({ level: 'warn', fields, message }),
    error: (fields: LogFields, message: string) => void lines.push({ level: 'error', fields, message }),
  }
  const options = resolveAdapterOptions<never, Queryable>({ engine: on, scope: 'global', log, onOutcome: (event) => events.push(event), ...extra })
  return { options, lines, events }
}

async function claim(on: Engine<Queryable> = engine, key: string = randomUUID()): Promise<Execution<Queryable>> {
  return owned(await on.begin({ scope: 'u1', key, fingerprint }))
}

const sent = (status: number, body = `{"status":${status}}`): CapturedResponse => ({
  kind: 'response',
  status,
  headers: [['content-type', 'application/json']],
  body: Buffer.from(body),
})

async function row(key: string) {
  const { rows } = await db.pool.query<{ status: string; response_status: number | null; fence_token: string | null }>(
    `SELECT status, response_status, fence_token::text FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

function problemOf(answer: HttpAnswer | null) {
  if (answer === null) throw new Error('expected a replacement answer')
  return {
    status: answer.status,
    headers: answer.headers,
    body: JSON.parse(Buffer.from(answer.body).toString('utf8')) as { type: string; title: string; status: number; detail: string; instance: string; retryable: boolean },
  }
}

const charges = async (id: string) => (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM guarded_charges WHERE id = $1', [id])).rows[0]?.n

describe('GuardedExecution: what a captured response is stored as', () => {
  it('stores a success as completed and sends it as it is; reports created with the time the guard took', async () => {
    const { options, events, lines } = adapter()
    const execution = await claim()
    const startedAt = performance.now()
    const guard = new GuardedExecution(options, execution, startedAt, ROUTE)
    expect(await guard.settle(sent(201))).toBeNull()
    const elapsed = performance.now() - startedAt
    expect(await row(execution.key)).toMatchObject({ status: 'completed', response_status: 201 })
    expect(events).toHaveLength(1)
    expect(events[0]).toMatchObject({ outcome: 'created', status: 201 })
    expect(events[0]).not.toHaveProperty('instance')
    expect(events[0]!.durationMs).toBeGreaterThanOrEqual(0)
    expect(events[0]!.durationMs).toBeLessThanOrEqual(elapsed)
    expect(lines).toEqual([])
  })

  it('stores a 400 after a possible side effect as failed, to be replayed, and reports it failed', async () => {
    const { options, events } = adapter()
    const execution = await claim()
    await execution.step('charge', async () => ({ id: 'ch_1' }))
    const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
    expect(await guard.settle(sent(400))).toBeNull()
    expect(await row(execution.key)).toMatchObject({ status: 'failed', response_status: 400 })
    expect(events.map((event) => [event.outcome, event.status])).toEqual([['failed', 400]])
    const replay = await engine.begin({ scope: 'u1', key: execution.key, fingerprint })
    expect(replay.kind).toBe('replay')
  })

  it('commits writeOnCompletion rows with a stored success and with a stored failure', async () => {
    for (const [status, stored] of [
      [201, 'completed'],
      [402, 'failed'],
    ] as const) {
      const { options } = adapter()
      const execution = await claim()
      await execution.step('charge', async () => ({ id: 'ch' }))
      const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
      const id = `ch_${status}_${execution.key}`
      guard.context.writeOnCompletion(async (tx) => {
        await tx.query({ text: 'INSERT INTO guarded_charges (id) VALUES ($1)', values: [id] })
      })
      expect(await guard.settle(sent(status))).toBeNull()
      expect(await row(execution.key)).toMatchObject({ status: stored, response_status: status })
      expect(await charges(id)).toBe(1)
    }
  })

  it('runs a statement among functions through the store, never by treating tx as a pg connection (issue 24)', async () => {
    // A store whose transaction handle is its own object, not a `Queryable`: only its
    // `runStatement` knows how to send SQL on it, so an adapter that queried `tx` itself fails.
    interface Handle {
      readonly connection: Queryable
    }
    const sql = createPostgresStore({ pool: db.pool, schema: db.schema })
    const ran: string[] = []
    const store = {
      ...sql,
      complete: (fence: Fence, completion: StoreCompletion<Handle>) =>
        completion.statements !== undefined
          ? sql.complete(fence, completion)
          : sql.complete(fence, { status: completion.status, response: completion.response, ...(completion.tx === undefined ? {} : { tx: completion.tx.connection }) }),
      transaction: <T>(work: (tx: Handle) => Promise<T>) => sql.transaction((connection) => work({ connection })),
      runStatement: async (tx: Handle, statement: { text: string; values?: readonly unknown[] }) => {
        ran.push(statement.text)
        await tx.connection.query({ text: statement.text, values: [...(statement.values ?? [])] })
      },
    }
    const wrapped = createEngine<Handle>({ store, staleAfterMs: 30_000 })
    const options = resolveAdapterOptions<never, Handle>({ engine: wrapped, scope: 'global', log: () => undefined })
    const execution = owned(await wrapped.begin({ scope: 'u1', key: randomUUID(), fingerprint }))
    const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
    const [first, second] = [`ch_a_${execution.key}`, `ch_b_${execution.key}`]
    const insert = { text: 'INSERT INTO guarded_charges (id) VALUES ($1)', values: [first] }
    guard.context.writeOnCompletion(insert)
    guard.context.writeOnCompletion(async (tx) => {
      await tx.connection.query({ text: 'INSERT INTO guarded_charges (id) VALUES ($1)', values: [second] })
    })
    expect(await guard.settle(sent(201))).toBeNull()
    expect(ran).toEqual([insert.text])
    expect(await row(execution.key)).toMatchObject({ status: 'completed' })
    expect([await charges(first), await charges(second)]).toEqual([1, 1])

    // Without `runStatement` the statement is refused: nothing is written, the request is answered.
    const { runStatement: _omitted, ...sqlless } = store
    const bare = createEngine<Handle>({ store: sqlless, staleAfterMs: 30_000 })
    const lines: string[] = []
    const refused = owned(await bare.begin({ scope: 'u1', key: randomUUID(), fingerprint }))
    const guarded = new GuardedExecution(resolveAdapterOptions<never, Handle>({ engine: bare, scope: 'global', log: (line) => lines.push(line) }), refused, performance.now(), ROUTE)
    guarded.context.writeOnCompletion({ text: 'INSERT INTO guarded_charges (id) VALUES ($1)', values: [`ch_c_${refused.key}`] })
    guarded.context.writeOnCompletion(async () => undefined)
    expect((await guarded.settle(sent(201)))?.status).toBe(503)
    expect(await charges(`ch_c_${refused.key}`)).toBe(0)
    expect(lines.join('\n')).toContain('this store cannot run')
  })

  it('sends writeOnCompletion statements alone with the completion in one flight, with a stored success and with a stored failure', async () => {
    const pool = countingPool(db.newPool(2, { pipeline: true }))
    const flying = createEngine({ store: createPostgresStore({ pool, schema: db.schema }), staleAfterMs: 30_000 })
    const { options } = adapter(flying)
    for (const [status, stored] of [
      [201, 'completed'],
      [402, 'failed'],
    ] as const) {
      const execution = await claim(flying)
      await execution.step('charge', async () => ({ id: 'ch' }))
      const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
      const id = `ch_flight_${status}_${execution.key}`
      guard.context.writeOnCompletion({ text: 'INSERT INTO guarded_charges (id) VALUES ($1)', values: [id] })
      pool.reset()
      expect(await guard.settle(sent(status))).toBeNull()
      // BEGIN, the fenced completion, the row and COMMIT left together: one round trip.
      expect(pool.statements.filter((text) => text.startsWith('BEGIN'))).toHaveLength(1)
      expect(pool.roundTrips()).toBe(1)
      expect(await row(execution.key)).toMatchObject({ status: stored, response_status: status })
      expect(await charges(id)).toBe(1)
    }
  })

  it('without writeOnCompletion work the completion is one statement, with it a transaction', async () => {
    const pool = countingPool(db.newPool(2))
    const counted = createEngine({ store: createPostgresStore({ pool, schema: db.schema }), staleAfterMs: 30_000 })
    const { options } = adapter(counted)

    const alone = await claim(counted)
    pool.reset()
    await new GuardedExecution(options, alone, performance.now(), ROUTE).settle(sent(201))
    expect(pool.statements.filter((text) => text.startsWith('BEGIN'))).toEqual([])
    expect(pool.roundTrips()).toBe(1)
    expect(await row(alone.key)).toMatchObject({ status: 'completed' })

    const withWrites = await claim(counted)
    const guard = new GuardedExecution(options, withWrites, performance.now(), ROUTE)
    guard.context.writeOnCompletion(async (tx) => {
      await tx.query({ text: 'INSERT INTO guarded_charges (id) VALUES ($1)', values: [`ch_tx_${withWrites.key}`] })
    })
    pool.reset()
    await guard.settle(sent(201))
    expect(pool.statements.filter((text) => text.startsWith('BEGIN'))).toHaveLength(1)
    expect(pool.statements).toContain('COMMIT')
    expect(await charges(`ch_tx_${withWrites.key}`)).toBe(1)
  })

  it('stores a body of exactly maxStoredBodyBytes; one byte more is sent, and recorded as a result-unavailable problem that every retry replays', async () => {
    const { options, events, lines } = adapter(engine, { maxStoredBodyBytes: 10 })
    const fits = await claim()
    expect(await new GuardedExecution(options, fits, performance.now(), ROUTE).settle(sent(200, '0123456789'))).toBeNull()
    expect(await row(fits.key)).toMatchObject({ status: 'completed', response_status: 200 })

    const tooLarge = await claim()
    expect(await new GuardedExecution(options, tooLarge, performance.now(), ROUTE).settle(sent(201, '0123456789A'))).toBeNull()
    expect(await row(tooLarge.key)).toMatchObject({ status: 'completed', response_status: 500 })
    expect(events.at(-1)).toEqual({ outcome: 'created', status: 201, durationMs: expect.any(Number) as unknown })
    const replay = await engine.begin({ scope: 'u1', key: tooLarge.key, fingerprint })
    if (replay.kind !== 'replay') throw new Error(`expected a replay, got ${replay.kind}`)
    const body = JSON.parse(Buffer.from(replay.response.body).toString('utf8')) as Record<string, unknown>
    expect(replay.response.headers).toEqual([['content-type', 'application/problem+json']])
    expect(body).toMatchObject({
      type: 'https://oncely.dev/problems/result-unavailable',
      title: 'Result unavailable',
      status: 500,
      detail: 'this operation ran and ended with status 201, but its response cannot be replayed: the 201 response had 11 bytes, more than maxStoredBodyBytes (10), so it was not stored; it is not run again',
      retryable: false,
      retry_same_key: false,
      new_key_safe: false,
      operation_state: 'completed',
      key_ttl_seconds: 86_400,
      result_status: 201,
    })
    // The log line carries the stored problem's instance, so a support request finds it.
    expect(lines).toEqual([
      {
        level: 'warn',
        fields: expect.objectContaining({ ...ROUTE, code: 'ONCELY_RESPONSE_NOT_REPLAYABLE', instance: body.instance }) as unknown,
        message: 'oncely: the 201 response had 11 bytes, more than maxStoredBodyBytes (10), so it was not stored; a retry is answered 500 result-unavailable',
      },
    ])
  })

  it('records a failure over maxStoredBodyBytes after a step as failed, its problem saying so', async () => {
    const { options } = adapter(engine, { maxStoredBodyBytes: 10 })
    const execution = await claim()
    await execution.step('charge', () => ({ declined: true }))
    expect(await new GuardedExecution(options, execution, performance.now(), ROUTE).settle(sent(402, '0123456789A'))).toBeNull()
    expect(await row(execution.key)).toMatchObject({ status: 'failed', response_status: 500 })
    const replay = await engine.begin({ scope: 'u1', key: execution.key, fingerprint })
    if (replay.kind !== 'replay') throw new Error(`expected a replay, got ${replay.kind}`)
    expect(JSON.parse(Buffer.from(replay.response.body).toString('utf8'))).toMatchObject({ operation_state: 'failed', result_status: 402 })
  })

  it('records a streamed response that could not be stored whole as result-unavailable, never releasing the key (issue 23)', async () => {
    const { options, lines } = adapter()
    const execution = await claim()
    const reason = 'the 200 response was cut after 8 bytes of its streamed body (the client went away), so it was not stored'
    expect(await new GuardedExecution(options, execution, performance.now(), ROUTE).settle({ kind: 'unstorable', status: 200, reason })).toBeNull()
    expect(await row(execution.key)).toMatchObject({ status: 'completed', response_status: 500 })
    const replay = await engine.begin({ scope: 'u1', key: execution.key, fingerprint })
    if (replay.kind !== 'replay') throw new Error(`expected a replay, got ${replay.kind}`)
    const body = JSON.parse(Buffer.from(replay.response.body).toString('utf8')) as { detail: string; instance: string }
    expect(body).toMatchObject({ type: 'https://oncely.dev/problems/result-unavailable', result_status: 200, operation_state: 'completed', new_key_safe: false })
    expect(body.detail).toBe(`this operation ran and ended with status 200, but its response cannot be replayed: ${reason}; it is not run again`)
    expect(lines).toEqual([{ level: 'warn', fields: expect.objectContaining({ code: 'ONCELY_RESPONSE_NOT_REPLAYABLE', instance: body.instance }) as unknown, message: `oncely: ${reason}; a retry is answered 500 result-unavailable` }])
  })

  it('lets a streamed response with a retryable status go as any such response: released before a step', async () => {
    const { options } = adapter()
    const execution = await claim()
    expect(await new GuardedExecution(options, execution, performance.now(), ROUTE).settle({ kind: 'unstorable', status: 503, reason: 'cut' })).toBeNull()
    expect(await row(execution.key)).toBeUndefined()
  })

  it('settles once: a later call resolves to null, writes nothing and reports nothing', async () => {
    const { options, events } = adapter()
    const execution = await claim()
    const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
    expect(guard.settled).toBe(false)
    expect(await guard.settle(sent(201, '{"first":true}'))).toBeNull()
    expect(guard.settled).toBe(true)
    expect(await guard.settle(sent(500, '{"second":true}'))).toBeNull()
    expect(events.map((event) => [event.outcome, event.status])).toEqual([['created', 201]])
    expect(await row(execution.key)).toMatchObject({ status: 'completed', response_status: 201 })
  })

  it('an onOutcome that throws is logged as an error with the request fields; the answer stands', async () => {
    const { options, lines } = adapter(engine, {
      onOutcome: () => {
        throw new Error('metrics down')
      },
    })
    const execution = await claim()
    const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
    expect(await guard.settle(sent(201))).toBeNull()
    expect(lines).toEqual([{ level: 'error', fields: guard.logFields, message: 'oncely: onOutcome threw: Error: metrics down' }])
    expect(await row(execution.key)).toMatchObject({ status: 'completed' })
  })

  it('a handler that ended its execution itself: its response is sent as it is, nothing more is written or logged, even when it then throws', async () => {
    const { options, events, lines } = adapter()
    const completed = await claim()
    await completed.complete({ status: 201, headers: [], body: Buffer.from('{"own":true}') })
    expect(await new GuardedExecution(options, completed, performance.now(), ROUTE).settle(sent(202))).toBeNull()

    const thrown = await claim()
    await thrown.complete({ status: 201, headers: [], body: Buffer.from('{"own":true}') })
    expect(await new GuardedExecution(options, thrown, performance.now(), ROUTE).settle({ kind: 'thrown', error: new Error('after completing') })).toBeNull()

    expect(events.map((event) => [event.outcome, event.status])).toEqual([
      ['created', 202],
      ['failed', 500],
    ])
    expect(lines).toEqual([])
    expect(await row(completed.key)).toMatchObject({ status: 'completed', response_status: 201 })
    expect(await row(thrown.key)).toMatchObject({ status: 'completed', response_status: 201 })
  })
})

describe('GuardedExecution: a redact hook that fails', () => {
  for (const [name, redact, why] of [
    ['throws', () => { throw new Error('the redactor is broken') }, 'it threw: Error: the redactor is broken'],
    ['changes the status', (response: StoredResponse) => ({ ...response, status: 200 }), 'it changed the status to 200'],
    ['returns no response', () => undefined as unknown as StoredResponse, 'it returned no { status, headers, body } response'],
    ['returns a body that is not bytes', (response: StoredResponse) => ({ ...response, body: 'masked' as unknown as Uint8Array }), 'it returned no { status, headers, body } response'],
  ] as const) {
    it(`${name}: the response is recorded as result-unavailable, and the warning and the problem say why`, async () => {
      const { options, lines } = adapter(engine, { redact })
      const execution = await claim()
      expect(await new GuardedExecution(options, execution, performance.now(), ROUTE).settle(sent(201))).toBeNull()
      const reason = `the redact hook failed on the 201 response (${why}), so it was not stored`
      expect(lines).toEqual([{ level: 'warn', fields: expect.objectContaining({ code: 'ONCELY_RESPONSE_NOT_REPLAYABLE' }) as unknown, message: `oncely: ${reason}; a retry is answered 500 result-unavailable` }])
      const replay = await engine.begin({ scope: 'u1', key: execution.key, fingerprint })
      if (replay.kind !== 'replay') throw new Error(`expected a replay, got ${replay.kind}`)
      expect((JSON.parse(Buffer.from(replay.response.body).toString('utf8')) as { detail: string }).detail).toBe(`this operation ran and ended with status 201, but its response cannot be replayed: ${reason}; it is not run again`)
    })
  }
})

describe('GuardedExecution: a completion that does not land', () => {
  it('a claim taken over while the handler ran: 409 telling the client to retry, its writes not committed', async () => {
    const { options, events } = adapter()
    const execution = await claim()
    await ageClaim(db, 'u1', execution.key)
    const takeOver = await engine.begin({ scope: 'u1', key: execution.key, fingerprint })
    expect(takeOver.kind).toBe('execute')
    const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
    const id = `ch_lost_${execution.key}`
    guard.context.writeOnCompletion(async (tx) => {
      await tx.query({ text: 'INSERT INTO guarded_charges (id) VALUES ($1)', values: [id] })
    })
    const answer = problemOf(await guard.settle(sent(201)))
    expect(answer.status).toBe(409)
    expect(answer.headers).toContainEqual(['retry-after', '1'])
    expect(answer.body).toMatchObject({ retryable: true, detail: 'another request took this Idempotency-Key over while it was processed; retry to get its outcome' })
    expect(events.map((event) => [event.outcome, event.status])).toEqual([['conflict', 409]])
    expect(await charges(id)).toBe(0)
    if (takeOver.kind === 'execute') await takeOver.execution.suspend()
  })

  it('a handler that throws after its claim was taken over: the release finds it gone and logs nothing', async () => {
    const { options, lines, events } = adapter()
    const execution = await claim()
    await ageClaim(db, 'u1', execution.key)
    const takeOver = await engine.begin({ scope: 'u1', key: execution.key, fingerprint })
    expect(await new GuardedExecution(options, execution, performance.now(), ROUTE).settle({ kind: 'thrown', error: new Error('boom') })).toBeNull()
    expect(lines).toEqual([])
    expect(events.map((event) => [event.outcome, event.status])).toEqual([['failed', 500]])
    expect(await row(execution.key)).toMatchObject({ status: 'in_progress' })
    if (takeOver.kind === 'execute') await takeOver.execution.suspend()
  })

  it('a write that fails the same way every time: 500 outcome not recorded, not retryable, logged with its code and instance', async () => {
    const { options, lines, events } = adapter()
    const execution = await claim()
    await execution.step('charge', async () => ({ id: 'ch' }))
    const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
    guard.context.writeOnCompletion(async (tx) => {
      await tx.query({ text: 'INSERT INTO no_such_table (id) VALUES ($1)', values: ['x'] })
    })
    const answer = problemOf(await guard.settle(sent(201)))
    expect(answer.status).toBe(500)
    expect(answer.body).toMatchObject({
      type: 'https://oncely.dev/problems/outcome-not-recorded',
      title: 'Outcome not recorded',
      detail: 'the outcome of this request could not be recorded, for a reason a retry will not fix; the operation is kept for an operator, quote the instance to support',
      retryable: false,
    })
    expect(events.map((event) => [event.outcome, event.status, event.instance])).toEqual([['failed', 500, answer.body.instance]])
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ level: 'error', fields: { ...guard.logFields, code: 'ONCELY_OUTCOME_NOT_RECORDED', instance: answer.body.instance } })
    expect(lines[0]!.message).toMatch(/^oncely: the outcome could not be recorded: OncelyError: .*no_such_table/)
    // Kept suspended for an operator, not released.
    expect(await row(execution.key)).toMatchObject({ status: 'in_progress', fence_token: null })
  })

  it('a handler past handlerDeadlineMs: 503 outcome not recorded, retryable after a second, logged with the deadline code', async () => {
    const deadlined = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 3_000, leaseRenewMs: 1_000, handlerDeadlineMs: 1_050 })
    const { options, lines, events } = adapter(deadlined)
    const execution = await claim(deadlined)
    const gone = deferred()
    const onLost = (message: unknown) => {
      if ((message as { key?: string }).key === execution.key) gone.resolve()
    }
    subscribe('oncely:lock-lost', onLost)
    try {
      await gone.promise
    } finally {
      unsubscribe('oncely:lock-lost', onLost)
    }
    expect(execution.state).toBe('lost')
    const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
    const answer = problemOf(await guard.settle(sent(201)))
    expect(answer.status).toBe(503)
    expect(answer.headers).toContainEqual(['retry-after', '1'])
    expect(answer.body).toMatchObject({
      type: 'https://oncely.dev/problems/outcome-not-recorded',
      title: 'Outcome not recorded',
      detail: 'the outcome of this request could not be recorded; retry with the same Idempotency-Key',
      retryable: true,
    })
    expect(events.map((event) => [event.outcome, event.status])).toEqual([['failed', 503]])
    // The claim is still held, by no one: a new key could run the operation twice.
    expect(answer.body).toMatchObject({ retry_same_key: true, new_key_safe: false, operation_state: 'running' })
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ level: 'error', fields: { ...guard.logFields, code: 'ONCELY_HANDLER_DEADLINE_EXCEEDED', instance: answer.body.instance } })
    expect(lines[0]!.message).toMatch(/^oncely: the outcome could not be stored: OncelyError: /)
    // Nothing was written: the claim waits to go stale, for a retry to take it over.
    expect(await row(execution.key)).toMatchObject({ status: 'in_progress' })
  })

  it('a completion that fails and lets the claim go: 503, retry with the same key; a new key is safe only when nothing ran, else the claim is suspended', async () => {
    // A statement among functions on a store without runStatement: refused inside the completion,
    // a failure the engine passes through as it is, so the adapter lets the claim go itself.
    const sqlless: Partial<PostgresStore> = { ...createPostgresStore({ pool: db.pool, schema: db.schema }) }
    delete sqlless.runStatement
    const bare = createEngine<Queryable>({ store: sqlless as PostgresStore, staleAfterMs: 30_000 })
    for (const stepFirst of [false, true]) {
      const { options, lines } = adapter(bare)
      const execution = await claim(bare)
      if (stepFirst) await execution.step('charge', async () => ({ id: 'ch' }))
      const guard = new GuardedExecution(options, execution, performance.now(), ROUTE)
      guard.context.writeOnCompletion({ text: 'INSERT INTO guarded_charges (id) VALUES ($1)', values: [`ch_go_${execution.key}`] })
      guard.context.writeOnCompletion(async () => undefined)
      const answer = problemOf(await guard.settle(sent(201)))
      expect(answer.status).toBe(503)
      expect(answer.headers).toContainEqual(['retry-after', '1'])
      expect(answer.body).toMatchObject({ type: 'https://oncely.dev/problems/outcome-not-recorded', retryable: true, retry_same_key: true })
      if (stepFirst) {
        expect(answer.body).toMatchObject({ new_key_safe: false, operation_state: 'suspended' })
        expect(await row(execution.key)).toMatchObject({ status: 'in_progress', fence_token: null })
      } else {
        expect(answer.body).toMatchObject({ new_key_safe: true, operation_state: 'none' })
        expect(await row(execution.key)).toBeUndefined()
      }
      expect(await charges(`ch_go_${execution.key}`)).toBe(0)
      expect(lines.map((line) => line.level)).toEqual(['error'])
      expect(lines[0]!.message).toMatch(/^oncely: the outcome could not be stored: .*this store cannot run/)
    }
  })

  it('the database away: a completion gets 503 store unavailable; a release that cannot be written is a warning with its code', async () => {
    const proxy = await startTcpProxy(db.url)
    const pool = new pg.Pool({ connectionString: proxy.url, max: 4, connectionTimeoutMillis: 500 })
    pool.on('error', () => {})
    try {
      const timing: Partial<EngineOptions<Queryable>> = { staleAfterMs: 1_200, claimRetryMs: 300 }
      const away = createEngine({ store: createPostgresStore({ pool, schema: db.schema }), ...timing })
      const { options, lines, events } = adapter(away)
      const completing = await claim(away)
      const releasing = await claim(away)
      proxy.cut()
      const [completion, release] = await Promise.all([
        new GuardedExecution(options, completing, performance.now(), ROUTE).settle(sent(201)),
        new GuardedExecution(options, releasing, performance.now(), ROUTE).settle({ kind: 'thrown', error: new Error('boom') }),
      ])
      const answer = problemOf(completion)
      expect(answer.status).toBe(503)
      expect(answer.headers).toContainEqual(['retry-after', '1'])
      expect(answer.body).toMatchObject({
        type: 'https://oncely.dev/problems/idempotency-store-unavailable',
        detail: 'the outcome of this request could not be recorded while the database is away; retry with the same Idempotency-Key',
        retryable: true,
      })
      expect(release).toBeNull()
      expect(events.map((event) => [event.outcome, event.status]).sort()).toEqual([
        ['failed', 500],
        ['failed', 503],
      ])
      const warnings = lines.filter((line) => line.level === 'warn')
      expect(warnings).toHaveLength(1)
      expect(warnings[0]!.fields).toMatchObject({ ...ROUTE, scope: 'u1', code: 'ONCELY_STORE_UNAVAILABLE' })
      expect(warnings[0]!.message).toMatch(/^oncely: the key could not be released; it is retried once its claim goes stale: OncelyError: /)
      const errors = lines.filter((line) => line.level === 'error')
      expect(errors).toHaveLength(1)
      expect(errors[0]!.fields).toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE', instance: answer.body.instance })
    } finally {
      proxy.restore()
      await pool.end()
      await proxy.close()
    }
  })
})
