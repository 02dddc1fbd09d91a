import { randomUUID } from 'node:crypto'
import type pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import type { ClaimRequest, Fence, FinalOutcome } from '../../src/engine/store.js'
import type { ClaimAttempt } from '../../src/engine/types.js'
import { deferred } from '../helpers/deferred.js'
import type { PoolLike, QueryConfig, QueryResult } from '../../src/store/postgres/index.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { MAX_BATCHED_BODY_BYTES } from '../../src/store/postgres/batched-writes.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { keyTable, storeClaim } from '../helpers/engine.js'

// Issue 21: the claims, and the completions, that arrive while one is in flight share one
// statement (maxBatchSize). Each of a batch must get the answer it would have got alone, a claim
// batch must never deadlock with another, one that PostgreSQL refuses must not fail the others,
// and a claim batch given up on must still report the claims it inserted late.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 11 } })
const table = () => keyTable(db)

function claimRequest(scope: string, key: string, extra: Partial<ClaimRequest> = {}): ClaimRequest {
  return { scope, key, fingerprint, ttlMs: 86_400_000, claimId: randomUUID(), fenceToken: randomUUID(), ...extra }
}

/** A pool that records every statement sent: a claim as `claim`, a claim batch as `batch`, a completion as `complete` or `complete batch`, any other by its first words. */
function recordingPool(pool: pg.Pool): PoolLike & { sent: string[] } {
  const sent: string[] = []
  return {
    sent,
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      const text = config.text.trimStart()
      sent.push(text.startsWith('WITH existing') ? 'claim' : text.startsWith('WITH seen') ? 'batch' : !text.startsWith('UPDATE') ? text.slice(0, 20) : updateKind(text))
      const result: QueryResult<unknown> = await pool.query(config)
      return result as QueryResult<R>
    },
    connect: () => pool.connect(),
  }
}

/** An UPDATE of the key table, by what it writes: `complete`, `step`, `mark`, each with ` batch` when batched. */
function updateKind(text: string): string {
  const batch = text.includes('json_to_recordset') ? ' batch' : ''
  const kind = text.includes('SET started_steps =') ? 'mark' : text.includes('SET recovery_point =') ? 'step' : text.includes('SET status =') ? 'complete' : text.slice(0, 20)
  return `${kind}${batch}`
}

/** A store on the test's pool whose every statement is recorded (`pool.sent`). */
function recordingStore(maxBatchSize?: number) {
  const pool = recordingPool(db.pool)
  return { pool, store: createPostgresStore({ pool, schema: db.schema, ...(maxBatchSize === undefined ? {} : { maxBatchSize }) }) }
}

/** Every claim settled, as its kind or the error's SQLSTATE or code. */
async function settle(attempts: Array<Promise<ClaimAttempt>>): Promise<string[]> {
  const settled = await Promise.allSettled(attempts)
  return settled.map((outcome) =>
    outcome.status === 'fulfilled' ? outcome.value.kind : String((outcome.reason as { code?: unknown }).code ?? outcome.reason),
  )
}

async function rowsOf(scope: string): Promise<Array<{ key: string; claim_id: string }>> {
  const { rows } = await db.pool.query<{ key: string; claim_id: string }>(`SELECT key, claim_id::text FROM ${table()} WHERE scope = $1 ORDER BY key`, [scope])
  return rows
}

describe('claims that arrive together share one statement (maxBatchSize)', () => {
  it('twenty claims sent at once: the first leaves alone, the nineteen that arrived while it was in flight leave as one batch', async () => {
    const { pool, store } = recordingStore()
    const scope = `batch-${randomUUID().slice(0, 8)}`
    const keys = Array.from({ length: 20 }, (_, n) => `k${String(n).padStart(2, '0')}`)
    const requests = keys.map((key) => claimRequest(scope, key))
    expect(await settle(requests.map((request) => store.claim(request)))).toEqual(keys.map(() => 'inserted'))
    expect(pool.sent).toEqual(['claim', 'batch'])
    // Each claim owns its own key, under the identity it minted.
    expect(await rowsOf(scope)).toEqual(requests.map((request) => ({ key: request.key, claim_id: request.claimId })))
  })

  it('maxBatchSize bounds a batch, and 1 sends every claim alone', async () => {
    for (const [size, expected] of [
      [1, ['claim', 'claim', 'claim', 'claim', 'claim', 'claim', 'claim']],
      [4, ['claim', 'batch', 'batch']],
    ] as const) {
      const { pool, store } = recordingStore(size)
      const scope = `batch-size-${size}-${randomUUID().slice(0, 8)}`
      const attempts = Array.from({ length: 7 }, (_, n) => store.claim(claimRequest(scope, `k${n}`)))
      expect(await settle(attempts)).toEqual(Array.from({ length: 7 }, () => 'inserted'))
      expect(pool.sent).toEqual(expected)
    }
  })

  it('each claim of a batch gets its own answer: new keys inserted, a key in flight and a completed key reported, two claims of one key one owner', async () => {
    const { pool, store } = recordingStore()
    const scope = `batch-mixed-${randomUUID().slice(0, 8)}`
    const inFlight = await storeClaim(store, { scope, key: 'in-flight', fingerprint })
    const done = await storeClaim(store, { scope, key: 'completed', fingerprint })
    if (inFlight.kind !== 'claimed' || done.kind !== 'claimed') throw new Error('the keys were not free')
    await store.complete(
      { scope, key: 'completed', fenceToken: done.claim.fenceToken },
      { status: 'completed', response: { status: 201, headers: [['content-type', 'application/json']], body: new TextEncoder().encode('{"ok":1}') } },
    )
    pool.sent.length = 0
    const twinA = claimRequest(scope, 'twin')
    const twinB = claimRequest(scope, 'twin')
    const requests = [claimRequest(scope, 'first'), claimRequest(scope, 'new'), claimRequest(scope, 'in-flight'), twinA, claimRequest(scope, 'completed'), twinB]
    const attempts = await Promise.all(requests.map((request) => store.claim(request)))
    const [, fresh, seenInFlight, a, seenDone, b] = attempts
    expect(fresh?.kind).toBe('inserted')
    expect(seenInFlight?.kind === 'existing' && { status: seenInFlight.snapshot.status, claimId: seenInFlight.snapshot.claimId }).toEqual({
      status: 'in_progress',
      claimId: inFlight.claim.claimId,
    })
    expect(seenDone?.kind === 'existing' && { status: seenDone.snapshot.status, body: new TextDecoder().decode(seenDone.snapshot.response?.body) }).toEqual({
      status: 'completed',
      body: '{"ok":1}',
    })
    // The twins: the first in the batch inserts, the second is left out of the answer (its insert
    // met the first's row) and, run once more, finds the key in flight under the first's claim.
    expect(a?.kind).toBe('inserted')
    expect(b?.kind === 'existing' && b.snapshot.claimId).toBe(twinA.claimId)
    expect(pool.sent).toEqual(['claim', 'batch', 'claim'])
    expect((await rowsOf(scope)).map((row) => row.key)).toEqual(['completed', 'first', 'in-flight', 'new', 'twin'])
  })

  it('a batch inserts its keys in byte order of scope and key, whatever order they arrived in: two batches never wait on each other in a cycle', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const schema = `"${db.schema.replaceAll('"', '""')}"`
    const scope = `batch-order-${randomUUID().slice(0, 8)}`
    // A row-level BEFORE INSERT trigger sees the rows in the order the INSERT proposes them.
    await db.pool.query(`CREATE TABLE ${schema}.insert_order (n bigserial, scope text, key text)`)
    await db.pool.query(`CREATE FUNCTION ${schema}.record_insert_order() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO ${schema}.insert_order (scope, key) VALUES (NEW.scope, NEW.key); RETURN NEW; END $$`)
    await db.pool.query(`CREATE TRIGGER record_insert_order BEFORE INSERT ON ${table()} FOR EACH ROW EXECUTE FUNCTION ${schema}.record_insert_order()`)
    try {
      const arrival = [[scope, 'lead'], [`${scope}-b`, 'a'], [scope, 'b'], [scope, 'B'], [scope, 'a'], [scope, 'A'], [`${scope}-a`, 'z']] as const
      expect(await settle(arrival.map(([s, key]) => store.claim(claimRequest(s, key))))).toEqual(arrival.map(() => 'inserted'))
      const { rows } = await db.pool.query<{ scope: string; key: string }>(`SELECT scope, key FROM ${schema}.insert_order WHERE scope LIKE $1 ORDER BY n`, [`${scope}%`])
      expect(rows.map((row) => `${row.scope.slice(scope.length)}/${row.key}`)).toEqual(['/lead', '/A', '/B', '/a', '/b', '-a/z', '-b/a'])
    } finally {
      await db.pool.query(`DROP TRIGGER IF EXISTS record_insert_order ON ${table()}`)
      await db.pool.query(`DROP FUNCTION IF EXISTS ${schema}.record_insert_order()`)
      await db.pool.query(`DROP TABLE IF EXISTS ${schema}.insert_order`)
    }
  })

  it('two stores sending overlapping batches in opposite orders, twenty rounds: no deadlock, one owner per key', async () => {
    const pools = [db.newPool(2), db.newPool(2)]
    try {
      const stores = pools.map((pool) => createPostgresStore({ pool, schema: db.schema }))
      const scope = `batch-cross-${randomUUID().slice(0, 8)}`
      for (let round = 0; round < 20; round++) {
        const keys = Array.from({ length: 12 }, (_, n) => `r${round}-k${n}`)
        const orders = [['lead-a', ...keys], ['lead-b', ...keys.toReversed()]]
        const outcomes = await Promise.all(orders.map((order, at) => settle(order.map((key) => stores[at]!.claim(claimRequest(scope, key))))))
        for (const outcome of outcomes) expect(outcome.every((kind) => kind === 'inserted' || kind === 'existing')).toBe(true)
        // Of the two claims of each shared key, exactly one inserted it.
        const inserted = keys.map((_, n) => [outcomes[0]![n + 1], outcomes[1]![keys.length - n]].filter((kind) => kind === 'inserted').length)
        expect(inserted).toEqual(keys.map(() => 1))
      }
    } finally {
      // db.close() ends the pools it made.
    }
  })

  it('a claim PostgreSQL refuses fails alone: the batch is run again claim by claim, and the others are inserted', async () => {
    const { pool, store } = recordingStore()
    const scope = `batch-refused-${randomUUID().slice(0, 8)}`
    // stale_after_ms > 0 is the key table's own check (migration 004): the engine never sends 0,
    // so a store used directly is the way to make one claim of a batch fail in PostgreSQL.
    const requests = [claimRequest(scope, 'lead'), claimRequest(scope, 'good-1'), claimRequest(scope, 'refused', { staleAfterMs: 0 }), claimRequest(scope, 'good-2')]
    expect(await settle(requests.map((request) => store.claim(request)))).toEqual(['inserted', 'inserted', '23514', 'inserted'])
    expect(pool.sent).toEqual(['claim', 'batch', 'claim', 'claim', 'claim'])
    expect((await rowsOf(scope)).map((row) => row.key)).toEqual(['good-1', 'good-2', 'lead'])
  })

  it('a connection terminated under a batch fails each of its claims with its error, not run again alone, and the batch inserts nothing', async () => {
    const application = `oncely-batch-cut-${randomUUID().slice(0, 8)}`
    const pool = db.newPool(2, { application_name: application })
    pool.on('error', () => undefined)
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 20_000, lockTimeoutMs: 10_000 })
    const scope = `batch-cut-${randomUUID().slice(0, 8)}`
    const [first, second] = [await db.pool.connect(), await db.pool.connect()]
    const insert = `INSERT INTO ${table()} (scope, key, fingerprint, status, claim_id, fence_token, locked_at, expires_at)
                    VALUES ($1, $2, $3, 'in_progress', $4::uuid, $5::uuid, now(), now() + interval '1 day')`
    try {
      // Two uncommitted rows: the lone claim waits on the first; the batch behind it, on the second.
      for (const [locker, key] of [[first, 'held-1'], [second, 'held-2']] as const) {
        await locker.query('BEGIN')
        await locker.query(insert, [scope, key, fingerprint, randomUUID(), randomUUID()])
      }
      const attempts = settle(['held-1', 'held-2', 'other'].map((key) => store.claim(claimRequest(scope, key))))
      await waitingOnLock(application, 'WITH existing')
      await first.query('ROLLBACK')
      await waitingOnLock(application, 'WITH seen')
      await db.pool.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'WITH seen%'`, [application])
      // 57P01, admin_shutdown: transient, so the engine sends each again; the store does not.
      expect(await attempts).toEqual(['inserted', '57P01', '57P01'])
      await second.query('ROLLBACK')
      expect((await rowsOf(scope)).map((row) => row.key)).toEqual(['held-1'])
    } finally {
      for (const locker of [first, second]) {
        await locker.query('ROLLBACK').catch(() => undefined)
        locker.release()
      }
    }
  })

  it('a batch given up on (statementTimeoutMs) whose answer comes late calls onLateInsert for each claim it inserted', async () => {
    const pool = db.newPool(1)
    pool.on('error', () => undefined)
    // pg's own query_timeout is the same 1 s, and starts once the connection is free: each
    // statement then has that long to run, a new connection's prepares included, on a loaded machine.
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 1000, lockTimeoutMs: 100 })
    const scope = `batch-late-${randomUUID().slice(0, 8)}`
    await storeClaim(createPostgresStore({ pool: db.pool, schema: db.schema }), { scope, key: 'there', fingerprint })
    // The pool's only connection is held: the lone claim and the batch behind it both wait for it past their timeout.
    const held = await pool.connect()
    const late: string[] = []
    const keys = ['lead', 'new-1', 'there', 'new-2']
    const outcomes = await settle(keys.map((key) => store.claim(claimRequest(scope, key, { onLateInsert: () => late.push(key) }))))
    expect(outcomes).toEqual(keys.map(() => 'ONCELY_STORE_UNAVAILABLE'))
    held.release()
    for (let n = 0; n < 500 && late.length < 3; n++) await new Promise((resolve) => setTimeout(resolve, 10))
    expect(late.toSorted()).toEqual(['lead', 'new-1', 'new-2'])
  })
})

/** Twelve keys, `k00` to `k11`. */
const twelveKeys = Array.from({ length: 12 }, (_, n) => `k${String(n).padStart(2, '0')}`)

/** What a batch test starts from: a recording store, `keys` claimed under a new scope named after `name`, nothing recorded yet. */
async function claimedKeys(name: string, keys: string[]) {
  const { pool, store } = recordingStore()
  const scope = `${name}-${randomUUID().slice(0, 8)}`
  const fences = await claimed(store, scope, keys)
  pool.sent.length = 0
  return { pool, store, scope, fences }
}

/** Claims `keys` under `scope` one by one, each its own owner's fence. */
async function claimed(store: ReturnType<typeof createPostgresStore>, scope: string, keys: string[]): Promise<Fence[]> {
  const fences: Fence[] = []
  for (const key of keys) {
    const attempt = await storeClaim(store, { scope, key, fingerprint })
    if (attempt.kind !== 'claimed') throw new Error(`${key} was not free`)
    fences.push({ scope, key, fenceToken: attempt.claim.fenceToken })
  }
  return fences
}

function outcome(status: number, body: string): FinalOutcome {
  return { status: 'completed', response: { status, headers: [['content-type', 'application/json'], ['x-n', String(status)]], body: new TextEncoder().encode(body) } }
}

async function completedRows(scope: string) {
  const { rows } = await db.pool.query<{ key: string; status: string; response_status: number | null; response_headers: unknown; body: string | null; locked_at: Date | null }>(
    `SELECT key, status, response_status, response_headers, convert_from(response_body, 'UTF8') AS body, locked_at FROM ${table()} WHERE scope = $1 ORDER BY key`,
    [scope],
  )
  return rows
}

describe('completions that arrive together share one statement (maxBatchSize)', () => {
  it('twelve completions at once: the first alone, the eleven behind it as one batch, each row settled with its own response', async () => {
    const keys = twelveKeys
    const { pool, store, scope, fences } = await claimedKeys('complete', keys)
    const done = await Promise.all(fences.map((fence, n) => store.complete(fence, outcome(200 + n, `{"n":${n},"é":"ü"}`))))
    expect(done).toEqual(keys.map(() => true))
    expect(pool.sent).toEqual(['complete', 'complete batch'])
    expect(await completedRows(scope)).toEqual(
      keys.map((key, n) => ({
        key,
        status: 'completed',
        response_status: 200 + n,
        response_headers: [['content-type', 'application/json'], ['x-n', String(200 + n)]],
        body: `{"n":${n},"é":"ü"}`,
        locked_at: null,
      })),
    )
  })

  it('a completion whose token no longer holds its claim answers false in a batch and writes nothing; the others complete', async () => {
    const { pool, store, scope, fences: [lead, a, lost, b] } = await claimedKeys('complete-fence', ['a-lead', 'b', 'c-lost', 'd'])
    const stale = { ...lost!, fenceToken: randomUUID() }
    const done = await Promise.all([lead!, a!, stale, b!].map((fence) => store.complete(fence, outcome(201, '{}'))))
    expect(done).toEqual([true, true, false, true])
    expect(pool.sent).toEqual(['complete', 'complete batch'])
    expect((await completedRows(scope)).map((row) => [row.key, row.status])).toEqual([
      ['a-lead', 'completed'],
      ['b', 'completed'],
      ['c-lost', 'in_progress'],
      ['d', 'completed'],
    ])
  })

  it('a body over 16 KiB is sent alone, beside the batch of the others', async () => {
    const { pool, store, scope, fences } = await claimedKeys('complete-large', ['a', 'b', 'c', 'd'])
    const large = `"${'x'.repeat(MAX_BATCHED_BODY_BYTES)}"`
    const bodies = ['{}', '{}', large, '{}']
    expect(await Promise.all(fences.map((fence, n) => store.complete(fence, outcome(201, bodies[n]!))))).toEqual([true, true, true, true])
    expect(pool.sent.toSorted()).toEqual(['complete', 'complete', 'complete batch'])
    expect((await completedRows(scope)).map((row) => row.body?.length)).toEqual([2, 2, large.length, 2])
  })

  it('a completion PostgreSQL refuses fails alone: the batch is run again one by one, and the others complete', async () => {
    const { pool, store, scope, fences } = await claimedKeys('complete-refused', ['a', 'b', 'c', 'd'])
    // The key table's status check (migration 001) refuses what the engine never sends.
    const refused = { ...outcome(201, '{}'), status: 'settled' } as unknown as FinalOutcome
    const settled = await Promise.allSettled(fences.map((fence, n) => store.complete(fence, n === 2 ? refused : outcome(201, '{}'))))
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value : (s.reason as { code?: string }).code))).toEqual([true, true, '23514', true])
    expect(pool.sent).toEqual(['complete', 'complete batch', 'complete', 'complete', 'complete'])
    expect((await completedRows(scope)).map((row) => row.status)).toEqual(['completed', 'completed', 'in_progress', 'completed'])
  })

  it('a batch wakes the waiter of a claim it completes (its row marked awaited)', async () => {
    const store = createPostgresStore({ pool: db.newPool(4), schema: db.schema })
    const scope = `complete-wake-${randomUUID().slice(0, 8)}`
    const [lead, watched, other] = await claimed(store, scope, ['a', 'b', 'c'])
    const { rows } = await db.pool.query<{ claim_id: string }>(`SELECT claim_id::text FROM ${table()} WHERE scope = $1 AND key = 'b'`, [scope])
    const woken = deferred()
    const watch = store.watchClaim?.({ scope, key: 'b', claimId: rows[0]!.claim_id }, () => woken.resolve())
    for (let n = 0; n < 500 && watch?.live !== true; n++) await new Promise((resolve) => setTimeout(resolve, 10))
    expect(watch?.live).toBe(true)
    try {
      expect(await Promise.all([lead!, watched!, other!].map((fence) => store.complete(fence, outcome(201, '{}'))))).toEqual([true, true, true])
      const answer = await Promise.race([woken.promise.then(() => 'woken'), new Promise((resolve) => setTimeout(() => resolve('not woken'), 5000))])
      expect(answer).toBe('woken')
    } finally {
      watch?.stop()
    }
  })
})

async function stepRows(scope: string) {
  const { rows } = await db.pool.query<{ key: string; recovery_point: string | null; step_results: Record<string, unknown>; started_steps: string[] }>(
    `SELECT key, recovery_point, step_results, started_steps FROM ${table()} WHERE scope = $1 ORDER BY key`,
    [scope],
  )
  return rows
}

describe('step writes that arrive together share one statement (maxBatchSize)', () => {
  it('twelve step commits at once: the first alone, the eleven behind it as one batch, each row with its own result, carried results and recovery point', async () => {
    const keys = twelveKeys
    const { pool, store, scope, fences } = await claimedKeys('step', keys)
    const done = await Promise.all(
      fences.map((fence, n) => store.commitStep(fence, 'charge', { id: `ch_${n}`, 'é': 'ü', big: 2 ** 53 - 1 }, { stepResults: { quote: { price: n } }, recoveryPoint: 'quote' })),
    )
    expect(done).toEqual(keys.map(() => true))
    expect(pool.sent).toEqual(['step', 'step batch'])
    expect(await stepRows(scope)).toEqual(
      keys.map((key, n) => ({ key, recovery_point: 'charge', step_results: { quote: { price: n }, charge: { id: `ch_${n}`, 'é': 'ü', big: 2 ** 53 - 1 } }, started_steps: [] })),
    )
  })

  it('twelve at-most-once step marks at once: one batch behind the first, each step recorded as started with the results it carries', async () => {
    const keys = twelveKeys
    const { pool, store, scope, fences } = await claimedKeys('mark', keys)
    const carried = (n: number) => (n % 2 === 0 ? { stepResults: { quote: { price: n } }, recoveryPoint: 'quote' } : undefined)
    expect(await Promise.all(fences.map((fence, n) => store.markStepStarted(fence, `email-${n}`, carried(n))))).toEqual(keys.map(() => true))
    expect(pool.sent).toEqual(['mark', 'mark batch'])
    expect(await stepRows(scope)).toEqual(
      keys.map((key, n) => ({ key, recovery_point: n % 2 === 0 ? 'quote' : null, step_results: n % 2 === 0 ? { quote: { price: n } } : {}, started_steps: [`email-${n}`] })),
    )
  })

  it("an execution's parallel steps, two writes to one row in what would be one batch: both land, the second after the batch", async () => {
    const { pool, store, scope, fences: [lead, a, b] } = await claimedKeys('step-same-row', ['a-lead', 'b', 'c'])
    const done = await Promise.all([
      store.commitStep(lead!, 'x', 1),
      store.commitStep(a!, 'quote', { price: 3 }),
      store.commitStep(b!, 'quote', { price: 4 }),
      store.commitStep(a!, 'charge', { id: 'ch_a' }),
      store.markStepStarted(a!, 'email'),
      store.markStepStarted(a!, 'sms'),
    ])
    expect(done).toEqual([true, true, true, true, true, true])
    // Commits and marks batch apart; a's second commit waits for the batch its first is in.
    expect(pool.sent.toSorted()).toEqual(['mark', 'mark', 'step', 'step', 'step batch'])
    const rows = await stepRows(scope)
    expect(rows.map((row) => [row.key, row.step_results, row.started_steps.toSorted()])).toEqual([
      ['a-lead', { x: 1 }, []],
      ['b', { quote: { price: 3 }, charge: { id: 'ch_a' } }, ['email', 'sms']],
      ['c', { quote: { price: 4 } }, []],
    ])
  })

  it('a step write whose token no longer holds its claim, or whose key is settled, answers false in a batch and writes nothing; the others land', async () => {
    const { pool, store, scope, fences: [lead, a, lost, settled, b] } = await claimedKeys('step-fence', ['a-lead', 'b', 'c-lost', 'd-settled', 'e'])
    const stale = { ...lost!, fenceToken: randomUUID() }
    // A settled row keeps its token (a worker recognises its own completion by it): the status decides.
    expect(await store.complete(settled!, outcome(201, '{}'))).toBe(true)
    pool.sent.length = 0
    const fences = [lead!, a!, stale, settled!, b!]
    expect(await Promise.all(fences.map((fence) => store.commitStep(fence, 'charge', { id: fence.key })))).toEqual([true, true, false, false, true])
    expect(pool.sent).toEqual(['step', 'step batch'])
    pool.sent.length = 0
    expect(await Promise.all(fences.map((fence) => store.markStepStarted(fence, 'email')))).toEqual([true, true, false, false, true])
    expect(pool.sent).toEqual(['mark', 'mark batch'])
    expect((await stepRows(scope)).map((row) => [row.key, row.recovery_point, row.started_steps])).toEqual([
      ['a-lead', 'charge', ['email']],
      ['b', 'charge', ['email']],
      ['c-lost', null, []],
      ['d-settled', null, []],
      ['e', 'charge', ['email']],
    ])
  })

  it('a step write over 16 KiB of JSON (its result and the results it carries) is sent alone, beside the batch of the others; one at 16 KiB is batched', async () => {
    const { pool, store, scope, fences } = await claimedKeys('step-large', ['a', 'b', 'c', 'd'])
    // {"text":"…"} is 11 bytes around the text, and the carried results `{}` 2 more; é is 2 bytes.
    const atLimit = { text: 'é'.repeat(10) + 'x'.repeat(MAX_BATCHED_BODY_BYTES - 13 - 20) }
    const overLimit = { text: 'x'.repeat(MAX_BATCHED_BODY_BYTES - 13 + 1) }
    const results = [{ n: 0 }, atLimit, overLimit, { n: 3 }]
    expect(await Promise.all(fences.map((fence, n) => store.commitStep(fence, 'charge', results[n])))).toEqual([true, true, true, true])
    expect(pool.sent.toSorted()).toEqual(['step', 'step', 'step batch'])
    expect((await stepRows(scope)).map((row) => row.step_results['charge'])).toEqual(results)
  })

  it('a step result PostgreSQL refuses fails alone: the batch is run again one by one, and the others commit', async () => {
    const { pool, store, scope, fences } = await claimedKeys('step-refused', ['a', 'b', 'c', 'd'])
    // jsonb refuses the escape \u0000 (SQLSTATE 22P05), which JSON.stringify writes for a NUL.
    const settled = await Promise.allSettled(fences.map((fence, n) => store.commitStep(fence, 'charge', n === 2 ? { text: 'a\u0000b' } : { n })))
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value : (s.reason as { code?: string }).code))).toEqual([true, true, '22P05', true])
    expect(pool.sent).toEqual(['step', 'step batch', 'step', 'step', 'step'])
    expect((await stepRows(scope)).map((row) => row.recovery_point)).toEqual(['charge', 'charge', null, 'charge'])
  })
})

/** Resolves once a backend of `application` running a statement that starts with `start` waits on a lock. */
async function waitingOnLock(application: string, start: string): Promise<void> {
  for (;;) {
    const { rows } = await db.pool.query<{ ok: boolean }>(
      `SELECT count(*) > 0 AS ok FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE $2`,
      [application, `${start}%`],
    )
    if (rows[0]?.ok === true) return
    await new Promise((resolve) => setImmediate(resolve))
  }
}
