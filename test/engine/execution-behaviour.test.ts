import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OncelyError, createEngine, engineChannelName, fingerprintRequest, isOncelyError, type EngineEvent, type Execution } from '../../src/index.js'
import { createPostgresStore, withTransaction, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// What an execution does at its edges (issue 13): the options it refuses, what a worker that lost
// its claim may no longer do, the label a write that could not be made carries, and writes whose
// answer was lost.

let db: TestDatabase
let proxy: TcpProxy
let proxied: pg.Pool
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE charges (id text PRIMARY KEY)')
  proxy = await startTcpProxy(db.url)
  proxied = new pg.Pool({ connectionString: proxy.url, max: 4 })
  proxied.on('error', () => undefined)
})
afterAll(async () => {
  await proxied.end()
  await proxy.close()
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 13 } })
const input = (key: string) => ({ scope: 'u1', key, fingerprint })

async function row(key: string) {
  const { rows } = await db.pool.query<{ status: string; fence_token: string | null; recovery_point: string | null; outcome_error: string | null }>(
    `SELECT status, fence_token::text, recovery_point, outcome_error FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

async function charges(id: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM charges WHERE id = $1', [id])
  return rows[0]!.n
}

/** A key held by a worker whose claim another worker then took over: the old worker and the taker. */
async function takenOver(key: string) {
  const { engine } = engineOn(db, { staleAfterMs: 60_000 })
  const old = owned(await engine.begin(input(key)))
  await ageClaim(db, 'u1', key)
  const taker = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
  expect(taker.how).toBe('take-over')
  return { old, taker }
}

/** A transient database error, as the store classifies it (57P01, the server shutting down). */
const transient = () => Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' })

/** An engine whose store is the real one with some methods replaced. */
function engineWith(overrides: (store: PostgresStore) => Partial<PostgresStore>, timing: { staleAfterMs: number; leaseRenewMs?: number } = { staleAfterMs: 60_000 }, pool: pg.Pool = db.pool) {
  const store = createPostgresStore({ pool, schema: db.schema })
  return createEngine({ ...timing, store: { ...store, ...overrides(store) } })
}

describe('the options a step and a completion refuse', () => {
  it('step options that are not an object are refused before the step runs, naming options', async () => {
    const execution = owned(await engineOn(db).engine.begin(input('opt-step')))
    let ran = false
    const run = () => (ran = true)
    await expect(execution.step('x', run, null as never)).rejects.toThrow(/^option options must be an object; got null/)
    await expect(execution.step('x', run, 'now' as never)).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    await expect(execution.step('x', run, { delivery: 'exactly-once' as never })).rejects.toThrow(/^option delivery must be 'at-least-once' or 'at-most-once'; got "exactly-once"/)
    expect(ran).toBe(false)
    await execution.release()
  })

  it("the defaults written out are accepted: delivery 'at-least-once', commit 'now'", async () => {
    const execution = owned(await engineOn(db).engine.begin(input('opt-defaults')))
    expect(await execution.step('a', () => 1, { delivery: 'at-least-once' })).toBe(1)
    expect(await execution.step('b', () => 2, { commit: 'now' })).toBe(2)
    expect((await row('opt-defaults'))?.recovery_point).toBe('b')
    await execution.complete(jsonResponse(201, '{}'))
  })

  it('completion options that are not an object are refused, naming options; writes that is not a function names writes', async () => {
    const execution = owned(await engineOn(db).engine.begin(input('opt-complete')))
    await expect(execution.complete(jsonResponse(201, '{}'), null as never)).rejects.toThrow(/^option options must be an object; got null/)
    await expect(execution.complete(jsonResponse(201, '{}'), 7 as never)).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
    await expect(execution.complete(jsonResponse(201, '{}'), { writes: 'INSERT' as never })).rejects.toThrow(/^option writes /)
    expect((await row('opt-complete'))?.status).toBe('in_progress')
    await execution.release()
  })

  it('tx alone is accepted, and the completion commits or rolls back with that transaction', async () => {
    const execution = owned(await engineOn(db).engine.begin(input('opt-tx')))
    const rollback = new Error('the caller rolls back')
    await expect(
      withTransaction(db.pool, async (tx) => {
        await execution.complete(jsonResponse(201, '{}'), { tx })
        expect(execution.state).toBe('completed')
        throw rollback
      }),
    ).rejects.toBe(rollback)
    // Rolled back with the caller's transaction: the claim is still in progress.
    expect((await row('opt-tx'))?.status).toBe('in_progress')

    const again = owned(await engineOn(db).engine.begin(input('opt-tx-commit')))
    await withTransaction(db.pool, async (tx) => {
      await again.complete(jsonResponse(201, '{}'), { tx })
    })
    expect((await row('opt-tx-commit'))?.status).toBe('completed')
  })
})

describe('an execution that ended', () => {
  it('refuses every further call with ONCELY_CLAIM_FINISHED, naming the key and how it ended', async () => {
    const execution = owned(await engineOn(db).engine.begin(input('ended')))
    await execution.complete(jsonResponse(201, '{}'))
    let ran = false
    await expect(execution.step('late', () => (ran = true))).rejects.toThrow('the execution of key "ended" already ended (completed)')
    await expect(execution.complete(jsonResponse(201, '{}'))).rejects.toMatchObject({ code: 'ONCELY_CLAIM_FINISHED' })
    expect(ran).toBe(false)
  })

  it("a step's value that is not JSON data is refused, naming the step", async () => {
    const execution = owned(await engineOn(db).engine.begin(input('not-json')))
    await expect(execution.step('charge', () => () => 1)).rejects.toThrow('step "charge" returned a value that is not JSON data')
    await execution.suspend()
  })
})

describe('what a claim someone may have acted on keeps (Invariant 11)', () => {
  it('a taken-over claim with no step recorded is suspended, not deleted, by release', async () => {
    const { old, taker } = await takenOver('release-taken')
    expect(taker.sideEffectsPossible).toBe(true)
    await taker.release()
    expect(taker.state).toBe('suspended')
    expect(await row('release-taken')).toMatchObject({ status: 'in_progress', fence_token: null })
    expect(old.state).toBe('running')
  })

  it('a take-over counts as acted on even from a store that hands the claim back unmarked', async () => {
    // The PostgreSQL store sets `interrupted` in the take-over itself; a store of someone else's
    // that forgets to must not turn the taker's release into a delete (execution.ts, the
    // `how === 'take-over'` half of Invariant 11's test).
    const old = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input('take-over-unmarked')))
    await ageClaim(db, 'u1', 'take-over-unmarked')
    const engine = engineWith((store) => ({
      takeOver: async (seen, take) => {
        const taken = await store.takeOver(seen, take)
        return taken && { ...taken, interrupted: false }
      },
    }))
    const taker = owned(await engine.begin(input('take-over-unmarked')))
    expect(taker.how).toBe('take-over')
    expect(taker.sideEffectsPossible).toBe(true)
    await taker.release()
    expect(taker.state).toBe('suspended')
    expect(await row('take-over-unmarked')).toMatchObject({ status: 'in_progress', fence_token: null })
    expect(old.state).toBe('running')
  })

  it('a step whose function threw may have acted: release suspends the claim', async () => {
    const execution = owned(await engineOn(db).engine.begin(input('step-threw')))
    const declined = new Error('the provider timed out after charging')
    await expect(execution.step('charge', () => Promise.reject(declined))).rejects.toBe(declined)
    expect(execution.sideEffectsPossible).toBe(true)
    await execution.release()
    expect(execution.state).toBe('suspended')
    expect(await row('step-threw')).toMatchObject({ status: 'in_progress', fence_token: null })
  })

  it('an at-most-once mark keeps the recovery point of the last committed step while its function runs', async () => {
    const execution = owned(await engineOn(db).engine.begin(input('mark-point')))
    await execution.step('charge', () => ({ id: 'ch' }))
    let during: unknown
    await execution.step(
      'receipt',
      async () => {
        during = { memory: execution.recoveryPoint, row: (await row('mark-point'))?.recovery_point }
        return 'sent'
      },
      { delivery: 'at-most-once' },
    )
    expect(during).toEqual({ memory: 'charge', row: 'charge' })
    await execution.complete(jsonResponse(201, '{}'))
  })
})

describe('a worker whose claim was taken over (Invariant 3)', () => {
  it('never runs an at-most-once step: its mark fails first', async () => {
    const { old, taker } = await takenOver('lost-mark')
    let sent = 0
    await expect(old.step('sms', () => sent++, { delivery: 'at-most-once' })).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    expect(sent).toBe(0)
    await taker.complete(jsonResponse(201, '{}'))
  })

  it('cannot suspend: ONCELY_LOCK_LOST, the taker keeps its claim', async () => {
    const { old, taker } = await takenOver('lost-suspend')
    await expect(old.suspend()).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    expect(old.state).toBe('lost')
    expect((await row('lost-suspend'))?.fence_token).toBe(taker.fenceToken)
    await taker.complete(jsonResponse(201, '{}'))
  })

  it('before any step: its completion throws ONCELY_LOCK_LOST, not ONCELY_OUTCOME_NOT_RECORDED', async () => {
    const { old, taker } = await takenOver('lost-plain')
    const error: unknown = await old.complete(jsonResponse(201, '{}')).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_LOCK_LOST')).toBe(true)
    await taker.complete(jsonResponse(201, '{}'))
  })

  it('completeInTransaction: ONCELY_LOCK_LOST and its business writes roll back', async () => {
    const { old, taker } = await takenOver('lost-in-tx')
    const error: unknown = await old
      .completeInTransaction(async (tx) => {
        await tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: ['ch_lost_in_tx'] })
        return { response: jsonResponse(201, '{}'), value: 1 }
      })
      .catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_LOCK_LOST')).toBe(true)
    expect(old.state).toBe('lost')
    expect(await charges('ch_lost_in_tx')).toBe(0)
    await taker.complete(jsonResponse(201, '{}'))
  })

  it('publishes lock-lost once, however many writes it tries after', async () => {
    const { old, taker } = await takenOver('lost-once')
    const events: EngineEvent[] = []
    const listener = (message: unknown) => events.push(message as EngineEvent)
    subscribe(engineChannelName('lock-lost'), listener)
    try {
      await expect(old.step('charge', () => 1)).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
      await expect(old.step('again', () => 2)).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
      await expect(old.complete(jsonResponse(201, '{}'))).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    } finally {
      unsubscribe(engineChannelName('lock-lost'), listener)
    }
    expect(events.map((e) => [e.event, e.key])).toEqual([['lock-lost', 'lost-once']])
    await taker.complete(jsonResponse(201, '{}'))
  })
})

describe('an outcome that cannot be stored', () => {
  it('records the error without its NUL characters and names the key in ONCELY_OUTCOME_NOT_RECORDED', async () => {
    const execution = owned(await engineOn(db).engine.begin(input('nul-error')))
    await execution.step('charge', () => ({ id: 'ch' }))
    const error: unknown = await execution.completeInTransaction(() => Promise.reject(new Error('bad\u0000byte'))).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_OUTCOME_NOT_RECORDED')).toBe(true)
    expect((error as Error).message).toBe('the outcome of key "nul-error" could not be stored: badbyte')
    expect(execution.state).toBe('suspended')
    expect((await row('nul-error'))?.outcome_error).toBe('badbyte')
  })

  it("an oncely error from the caller's work passes through and the execution keeps its claim", async () => {
    const execution = owned(await engineOn(db).engine.begin(input('work-oncely-error')))
    const thrown = new OncelyError('ONCELY_INVALID_OPTION', 'the caller refused its own input')
    await expect(execution.completeInTransaction(() => Promise.reject(thrown))).rejects.toBe(thrown)
    expect(execution.state).toBe('running')
    await execution.complete(jsonResponse(201, '{}'))
    expect((await row('work-oncely-error'))?.status).toBe('completed')
  })
})

describe('the database away past the lease (issue 8, path 4)', () => {
  const away = () => Promise.reject(transient())
  it("a step's commit gives up with ONCELY_STORE_UNAVAILABLE naming the step and the key, and the worker gives the claim up", async () => {
    const engine = engineWith(() => ({ renewLease: away, commitStep: away }), { staleAfterMs: 1000, leaseRenewMs: 100 })
    const execution = owned(await engine.begin(input('away-step')))
    const error: unknown = await execution.step('charge', () => 1).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    expect((error as Error).message).toContain('committing step "charge" for key "away-step"')
    expect(execution.state).toBe('lost')
  })

  it('an at-most-once mark names what it was recording', async () => {
    const engine = engineWith(() => ({ renewLease: away, markStepStarted: away }), { staleAfterMs: 1000, leaseRenewMs: 100 })
    const execution = owned(await engine.begin(input('away-mark')))
    await expect(execution.step('sms', () => 1, { delivery: 'at-most-once' })).rejects.toThrow('recording step "sms" as started for key "away-mark"')
  })

  /** The store away for every write but the claim: renewals fail too, so the lease runs out. */
  const awayEngine = () =>
    engineWith(() => ({ renewLease: away, release: away, suspend: away, complete: away, transaction: away }), { staleAfterMs: 1000, leaseRenewMs: 100 })

  it('a release names its write', async () => {
    const execution = owned(await awayEngine().begin(input('away-release')))
    await expect(execution.release()).rejects.toThrow('releasing the claim for key "away-release"')
  })

  it('a suspension names its write', async () => {
    const execution = owned(await awayEngine().begin(input('away-suspend')))
    await expect(execution.suspend()).rejects.toThrow('suspending the claim for key "away-suspend"')
  })

  it('a completion names the outcome it was storing', async () => {
    const execution = owned(await awayEngine().begin(input('away-complete')))
    await expect(execution.fail(jsonResponse(402, '{}'))).rejects.toThrow('storing the failed outcome for key "away-complete"')
    expect(execution.state).toBe('lost')
  })

  it('completeInTransaction names its transaction', async () => {
    const execution = owned(await awayEngine().begin(input('away-in-tx')))
    await expect(execution.completeInTransaction(async () => ({ response: jsonResponse(201, '{}'), value: 1 }))).rejects.toThrow(
      'completing in a transaction for key "away-in-tx"',
    )
    expect(execution.state).toBe('lost')
  })
})

/**
 * An engine whose first completion transaction fails transiently once its work and completion
 * ran; with `ignoringCommit`, on a store that sends the COMMIT only once the work ended (it ignores
 * `commit`, as a store may), so that failure comes before the COMMIT left.
 */
function failingOnceAfterWork(ignoringCommit: boolean, pool: pg.Pool = db.pool) {
  const tries = { attempts: 0, runs: 0 }
  const engine = engineWith((store) => ({
    ...(ignoringCommit ? { complete: (fence, { commit: _commit, ...completion }) => store.complete(fence, completion) } : {}),
    transaction: (run) =>
      store.transaction(async (tx) => {
        const value = await run(tx)
        if (++tries.attempts === 1) throw transient()
        return value
      }),
  }), { staleAfterMs: 60_000 }, pool)
  const chargeInTransaction = (execution: Execution<Queryable>, id: string) =>
    execution.completeInTransaction(async (tx) => {
      tries.runs++
      await tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] })
      return { response: jsonResponse(201, '{}'), value: id }
    })
  return { engine, tries, chargeInTransaction }
}

describe('a completion transaction that failed transiently before its COMMIT landed', () => {
  it('runs its work again and commits: the row is read back and not taken for landed', async () => {
    const { engine, tries, chargeInTransaction } = failingOnceAfterWork(true)
    const execution = owned(await engine.begin(input('not-landed')))
    const value = await chargeInTransaction(execution, 'ch_not_landed')
    expect({ value, runs: tries.runs, state: execution.state }).toEqual({ value: 'ch_not_landed', runs: 2, state: 'completed' })
    expect((await row('not-landed'))?.status).toBe('completed')
    expect(await charges('ch_not_landed')).toBe(1)
  })
})

describe('a completion that left with its COMMIT (issue 21), then a transient error', () => {
  it('is read back as landed: the work does not run again, its value is returned, the row written once', async () => {
    // The COMMIT leaves with the completion only on a connection that has already parsed the
    // completion's named statement (one-sync.ts); on one that has not, the statement goes alone
    // and the COMMIT after it, the case above. So: one connection, warmed by a completion first.
    const pool = db.newPool(1)
    const warm = owned(await engineWith(() => ({}), { staleAfterMs: 60_000 }, pool).begin(input('landed-with-commit-warm')))
    await warm.completeInTransaction(async () => ({ response: jsonResponse(201, '{}'), value: 'warm' }))
    const { engine, tries, chargeInTransaction } = failingOnceAfterWork(false, pool)
    const execution = owned(await engine.begin(input('landed-with-commit')))
    const value = await chargeInTransaction(execution, 'ch_landed_with_commit')
    expect({ value, ...tries, state: execution.state }).toEqual({ value: 'ch_landed_with_commit', runs: 1, attempts: 1, state: 'completed' })
    expect((await row('landed-with-commit'))?.status).toBe('completed')
    expect(await charges('ch_landed_with_commit')).toBe(1)
  })
})

describe('a write whose answer was lost is recognised as this worker’s own (issue 8, path 16)', () => {
  const proxiedEngine = () => createEngine({ store: createPostgresStore({ pool: proxied, schema: db.schema }), staleAfterMs: 60_000 })

  it('a release: the key is free, the execution released', async () => {
    const execution = owned(await proxiedEngine().begin(input('lost-answer-release')))
    const cut = proxy.cutNextAnswer({ to: '_release' })
    await execution.release()
    await cut
    expect(execution.state).toBe('released')
    expect(await row('lost-answer-release')).toBeUndefined()
  })

  it.each([
    ['plain', false],
    ['pipelining', true],
  ])('completeInTransaction on a %s pool, its completion sent with the COMMIT (issue 21): read back as landed, the work not run again', async (kind, pipeline) => {
    // One connection, its completion statement prepared by a first completeInTransaction.
    const pool = new pg.Pool({ connectionString: proxy.url, max: 1, pipeline })
    pool.on('error', () => undefined)
    try {
      const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }), staleAfterMs: 60_000 })
      const insert = (tx: Queryable, id: string) => tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] })
      await owned(await engine.begin(input(`lost-answer-in-tx-warm-${kind}`))).completeInTransaction(async (tx) => {
        await insert(tx, `ch_lost_answer_warm_${kind}`)
        return { response: jsonResponse(201, '{}'), value: undefined }
      })
      const execution = owned(await engine.begin(input(`lost-answer-in-tx-${kind}`)))
      // The answer to the completion and its COMMIT is dropped and the connection cut: both ran.
      const cut = proxy.cutNextAnswer({ to: '_complete_in_flight' })
      let runs = 0
      const value = await execution.completeInTransaction(async (tx) => {
        runs++
        await insert(tx, `ch_lost_answer_in_tx_${kind}`)
        return { response: jsonResponse(201, '{}'), value: `ch_lost_answer_in_tx_${kind}` }
      })
      await cut
      expect({ value, runs, state: execution.state }).toEqual({ value: `ch_lost_answer_in_tx_${kind}`, runs: 1, state: 'completed' })
      expect(await charges(`ch_lost_answer_in_tx_${kind}`)).toBe(1)
    } finally {
      await pool.end()
    }
  })

  it('a suspension: the claim kept, the execution suspended', async () => {
    const execution = owned(await proxiedEngine().begin(input('lost-answer-suspend')))
    const cut = proxy.cutNextAnswer({ to: '_suspend' })
    await execution.suspend()
    await cut
    expect(execution.state).toBe('suspended')
    expect(await row('lost-answer-suspend')).toMatchObject({ status: 'in_progress', fence_token: null })
  })
})

describe('a write that landed, its answer lost, and the claim taken over before the retry', () => {
  /** The store's `method` lands its first call, then another worker takes the claim over, then the answer is lost. */
  function takenOverAfter(method: 'commitStep' | 'markStepStarted', key: string) {
    let calls = 0
    return engineWith((store) => ({
      [method]: async (...args: Parameters<PostgresStore[typeof method]>) => {
        const landed = await (store[method] as (...a: typeof args) => Promise<boolean>)(...args)
        if (++calls > 1) return landed
        await ageClaim(db, 'u1', key)
        owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
        throw transient()
      },
    }))
  }

  it('a step: the row read back is the taker’s, so ONCELY_LOCK_LOST, not a committed step', async () => {
    const execution = owned(await takenOverAfter('commitStep', 'landed-then-taken').begin(input('landed-then-taken')))
    await expect(execution.step('charge', () => 1)).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    expect(execution.state).toBe('lost')
  })

  it('an at-most-once mark: ONCELY_LOCK_LOST, and the send never runs', async () => {
    const execution = owned(await takenOverAfter('markStepStarted', 'marked-then-taken').begin(input('marked-then-taken')))
    let sent = 0
    await expect(execution.step('sms', () => sent++, { delivery: 'at-most-once' })).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    expect(sent).toBe(0)
  })
})

describe('the end events', () => {
  it('completed carries no code; only lock-lost says why', async () => {
    const events: EngineEvent[] = []
    const listener = (message: unknown) => events.push(message as EngineEvent)
    subscribe(engineChannelName('completed'), listener)
    try {
      const execution = owned(await engineOn(db).engine.begin(input('end-event')))
      await execution.complete(jsonResponse(201, '{}'))
    } finally {
      unsubscribe(engineChannelName('completed'), listener)
    }
    expect(events).toHaveLength(1)
    expect(events[0]).not.toHaveProperty('code')
  })

  it('a renewal refused while the completion is in flight is the completion landing, not a lost claim', async () => {
    // The completion commits, then its answer waits while the lease ticks: every renewal now
    // finds the row completed and is refused. That refusal must not end the execution as lost.
    let renewalsAfterCommit = 0
    let committed = false
    const engine = engineWith(
      (store) => ({
        renewLease: async (fence, ttlMs) => {
          const renewed = await store.renewLease(fence, ttlMs)
          if (committed && !renewed) renewalsAfterCommit++
          return renewed
        },
        complete: async (fence, completion) => {
          const done = await store.complete(fence, completion)
          committed = true
          const until = Date.now() + 2_000
          while (renewalsAfterCommit < 2 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 10))
          return done
        },
      }),
      { staleAfterMs: 60_000, leaseRenewMs: 10 },
    )
    const lost: EngineEvent[] = []
    const listener = (message: unknown) => lost.push(message as EngineEvent)
    subscribe(engineChannelName('lock-lost'), listener)
    try {
      const execution = owned(await engine.begin(input('refused-while-completing')))
      await execution.complete(jsonResponse(201, '{}'))
      expect(lost).toEqual([])
      expect(execution.state).toBe('completed')
    } finally {
      unsubscribe(engineChannelName('lock-lost'), listener)
    }
    // The lease kept ticking through the wait: the refusals happened, and were let be.
    expect(renewalsAfterCommit).toBeGreaterThanOrEqual(2)
  })
})
