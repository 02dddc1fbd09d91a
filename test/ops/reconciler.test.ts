import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { deriveStepKey, fingerprintRequest, isOncelyError } from '../../src/index.js'
import { inspectKey } from '../../src/ops/keys.js'
import { reconcileStuckClaims, type ReconcileClaim, type ReconcileHook } from '../../src/ops/reconciler.js'
import { withTransaction, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { latch } from '../helpers/deferred.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'
import { deadClaim as makeDeadClaim } from './support/dead-claim.js'

const STALE = 60_000
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE business_rows (scope text, key text, claim_id text)')
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 5 } })
let nextScope = 1
const newScope = () => `rec-${nextScope++}`
const quiet = { info() {}, warn() {}, error() {} }

const deadClaim = (scope: string, key: string, step?: string) => makeDeadClaim(db, { scope, key, fingerprint, ...(step === undefined ? {} : { step }) })

function reconcile(hook: ReconcileHook<Queryable>, pool: pg.Pool = db.pool) {
  const { engine } = engineOn(db, { staleAfterMs: STALE }, pool)
  return reconcileStuckClaims({ engine, database: { pool, schema: db.schema }, hook, olderThanMs: STALE, log: quiet })
}

const SHORT_STALE = 1000

/**
 * Runs the reconciler (stale threshold `SHORT_STALE`) on a pool through a TCP proxy of the
 * test's own: `arm` gets the proxy before the run starts, `during` while it runs.
 */
async function reconcileThroughProxy(run: {
  hookDeadlineMs: number
  hook: ReconcileHook<Queryable>
  arm?: (proxy: TcpProxy) => void
  during?: () => Promise<void>
}) {
  const proxy = await startTcpProxy(db.url)
  const pool = new pg.Pool({ connectionString: proxy.url, max: 4 })
  pool.on('error', () => undefined)
  try {
    const { engine } = engineOn(db, { staleAfterMs: SHORT_STALE }, pool)
    run.arm?.(proxy)
    const reported = reconcileStuckClaims({ engine, database: { pool, schema: db.schema }, olderThanMs: SHORT_STALE, hookDeadlineMs: run.hookDeadlineMs, log: quiet, hook: run.hook })
    await run.during?.()
    return await reported
  } finally {
    await pool.end()
    await proxy.close()
  }
}

describe('reconcileStuckClaims', () => {
  it('hands a dead claim to the hook with what is known; complete stores the response with the business rows in one transaction', async () => {
    const scope = newScope()
    const claim = await deadClaim(scope, 'found', 'charge')
    const seen: Array<ReconcileClaim<Queryable>> = []
    const reports = await reconcile(async (stuck) => {
      if (stuck.scope !== scope) return
      seen.push(stuck)
      await withTransaction(db.pool, async (tx) => {
        await tx.query({ text: 'INSERT INTO business_rows VALUES ($1, $2, $3)', values: [stuck.scope, stuck.key, stuck.claimId] })
        await stuck.complete(jsonResponse(201, '{"id":"ch_found"}'), { tx })
      })
    })
    expect(reports.filter((r) => r.scope === scope)).toMatchObject([{ key: 'found', decision: 'completed' }])
    expect(seen[0]).toMatchObject({ claimId: claim.claimId, fingerprint, recoveryPoint: 'charge', steps: { charge: { id: 'ch_step' } }, expired: false })
    expect(seen[0]?.stepKeys).toEqual({ charge: deriveStepKey({ scope, key: 'found', claimId: claim.claimId, step: 'charge' }) })
    expect(seen[0]?.stepKey('refund')).toBe(deriveStepKey({ scope, key: 'found', claimId: claim.claimId, step: 'refund' }))
    const { rows } = await db.pool.query('SELECT claim_id FROM business_rows WHERE scope = $1', [scope])
    expect(rows).toEqual([{ claim_id: claim.claimId }])
    // A retry now gets the stored answer, byte for byte.
    const { engine } = engineOn(db)
    const replay = await engine.begin({ scope, key: 'found', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"id":"ch_found"}')
  })

  it('nothing happened: the claim stays, suspended, with the same identity; the next retry resumes it with the same step keys', async () => {
    const scope = newScope()
    const claim = await deadClaim(scope, 'absent')
    const reports = await reconcile(async () => {})
    expect(reports.find((r) => r.scope === scope)).toMatchObject({ decision: 'unresolved' })
    expect(await inspectKey({ pool: db.pool, schema: db.schema }, { scope, key: 'absent' })).toMatchObject({ state: 'suspended', claimId: claim.claimId })
    const { engine } = engineOn(db)
    const retry = await engine.begin({ scope, key: 'absent', fingerprint })
    expect(retry.kind === 'execute' && retry.execution.claimId).toBe(claim.claimId)
    if (retry.kind === 'execute') await retry.execution.complete(jsonResponse(201, '{}'))
  })

  it('nothing found past the TTL: settled as failed with a stored problem; before it, the reconciler never lengthens the key\'s life', async () => {
    const scope = newScope()
    await deadClaim(scope, 'old')
    await deadClaim(scope, 'young')
    await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 minute' WHERE scope = $1 AND key = 'old'`, [scope])
    const expiresAt = async () => (await db.pool.query<{ e: string }>(`SELECT expires_at::text AS e FROM ${keyTable(db)} WHERE scope = $1 AND key = 'young'`, [scope])).rows[0]?.e
    const before = await expiresAt()
    const reports = await reconcile(async () => {})
    expect(Object.fromEntries(reports.filter((r) => r.scope === scope).map((r) => [r.key, r.decision]))).toEqual({ old: 'expired', young: 'unresolved' })
    const old = await inspectKey({ pool: db.pool, schema: db.schema }, { scope, key: 'old' })
    expect(old).toMatchObject({ status: 'failed', response: { status: 502 } })
    expect(JSON.parse(old?.response?.body ?? '{}')).toMatchObject({ type: 'https://oncely.dev/problems/outcome-unknown', status: 502 })
    expect(await expiresAt()).toBe(before)
  })

  it('a hook that throws leaves the claim suspended and reports the error; fail stores a final failure', async () => {
    const scope = newScope()
    await deadClaim(scope, 'boom')
    await deadClaim(scope, 'declined')
    const reports = await reconcile(async (stuck) => {
      if (stuck.scope !== scope) return
      if (stuck.key === 'boom') throw new Error('provider lookup failed')
      await stuck.fail(jsonResponse(402, '{"type":"card-declined"}'))
    })
    const mine = Object.fromEntries(reports.filter((r) => r.scope === scope).map((r) => [r.key, r.decision]))
    expect(mine).toEqual({ boom: 'error', declined: 'failed' })
    expect((await inspectKey({ pool: db.pool, schema: db.schema }, { scope, key: 'boom' }))?.state).toBe('suspended')
    expect((await inspectKey({ pool: db.pool, schema: db.schema }, { scope, key: 'declined' }))?.response?.status).toBe(402)
  })

  it('never touches a claim whose owner renews its lease', async () => {
    const scope = newScope()
    const { engine } = engineOn(db, { staleAfterMs: STALE })
    const live = await engine.begin({ scope, key: 'live', fingerprint })
    let called = 0
    await reconcile(async (stuck) => {
      if (stuck.scope === scope) called++
    })
    expect(called).toBe(0)
    if (live.kind === 'execute') await live.execution.complete(jsonResponse(201, '{}'))
  })

  it('of 20 retries and the reconciler racing for one stale claim on real connections, exactly one acts', async () => {
    const scope = newScope()
    await deadClaim(scope, 'raced')
    const pools = Array.from({ length: 21 }, () => new pg.Pool({ connectionString: db.url, max: 1 }))
    try {
      await Promise.all(pools.map(async (pool) => (await pool.connect()).release()))
      const start = latch(21)
      let hookCalls = 0
      const [reconciled, ...retries] = await Promise.all(
        pools.map(async (pool, index) => {
          await start.arrive()
          if (index === 0) {
            return reconcile(async (stuck) => {
              if (stuck.scope !== scope) return
              hookCalls++
              await stuck.complete(jsonResponse(201, '{"by":"reconciler"}'))
            }, pool)
          }
          return engineOn(db, { staleAfterMs: STALE }, pool).engine.begin({ scope, key: 'raced', fingerprint })
        }),
      )
      const executions = retries.filter((d) => !Array.isArray(d) && d.kind === 'execute')
      expect(hookCalls + executions.length).toBe(1)
      // A retry that took the claim over before the reconciler listed the stuck claims leaves it
      // nothing to see; one that took it over between the list and the take-over leaves it 'skipped'.
      const decisions = Array.isArray(reconciled) ? reconciled.filter((r) => r.scope === scope).map((r) => r.decision) : []
      if (hookCalls === 1) expect(decisions).toEqual(['completed'])
      else expect([[], ['skipped']]).toContainEqual(decisions)
      for (const decision of executions) if (!Array.isArray(decision) && decision.kind === 'execute') await decision.execution.complete(jsonResponse(201, '{}'))
    } finally {
      await Promise.all(pools.map((pool) => pool.end()))
    }
  })

  it('refuses a threshold below the stale threshold: it would take claims from owners that still renew', async () => {
    const { engine } = engineOn(db, { staleAfterMs: STALE })
    const error: unknown = await reconcileStuckClaims({ engine, database: { pool: db.pool, schema: db.schema }, hook: async () => {}, olderThanMs: STALE - 1 }).catch((caught: unknown) => caught)
    expect(isOncelyError(error, 'ONCELY_INVALID_OPTION') && error.message).toMatch(/olderThanMs/)
  })

  it('a hook that never returns is given up at hookDeadlineMs: the run goes on, the lease stops so a retry takes the claim over, and a late complete is refused', async () => {
    const scope = newScope()
    await deadClaim(scope, 'hung')
    const short = 1000
    const { engine } = engineOn(db, { staleAfterMs: short })
    let hung: ReconcileClaim<Queryable> | undefined
    const reports = await reconcileStuckClaims({
      engine,
      database: { pool: db.pool, schema: db.schema },
      olderThanMs: short,
      hookDeadlineMs: 700,
      log: quiet,
      hook: async (stuck) => {
        if (stuck.scope !== scope) return
        hung = stuck
        await new Promise(() => {})
      },
    })
    expect(reports.filter((r) => r.scope === scope)).toMatchObject([{ key: 'hung', decision: 'error', detail: expect.stringContaining('hookDeadlineMs (700 ms)') as unknown }])
    await expect(hung?.complete(jsonResponse(201, '{}'))).rejects.toMatchObject({ code: 'ONCELY_HANDLER_DEADLINE_EXCEEDED' })
    // Its lease (renewed every 333 ms while the hook ran) is no longer renewed: once stale, a retry owns it.
    await new Promise((resolve) => setTimeout(resolve, short + 200))
    const retry = await engine.begin({ scope, key: 'hung', fingerprint })
    expect(retry).toMatchObject({ kind: 'execute', execution: { how: 'take-over' } })
    if (retry.kind === 'execute') await retry.execution.complete(jsonResponse(201, '{"by":"retry"}'))
  })

  it('an outcome the hook sent before hookDeadlineMs that lands after it is reported as stored, not as given up', async () => {
    const scope = newScope()
    await deadClaim(scope, 'late-landing')
    let late: ReturnType<TcpProxy['holdNext']> | undefined
    let second: unknown
    const reports = await reconcileThroughProxy({
      hookDeadlineMs: 300,
      hook: async (stuck) => {
        if (stuck.scope !== scope) return
        const first = stuck.complete(jsonResponse(201, '{"id":"ch_late"}'))
        // A second outcome while the first is on its way is refused, as one after it is.
        second = await stuck.fail(jsonResponse(500, '{}')).catch((error: unknown) => error)
        await first
      },
      // The completion (its statement's name ends a Parse's or a Bind's name field) waits in the
      // proxy well past the deadline, then reaches PostgreSQL; its fence still holds, as no retry
      // took the claim over.
      arm: (proxy) => void (late = proxy.holdNext('_complete\u0000')),
      during: async () => {
        await late?.held
        await new Promise((resolve) => setTimeout(resolve, 1200))
        late?.release()
      },
    })
    expect(reports.filter((r) => r.scope === scope)).toMatchObject([{ key: 'late-landing', decision: 'completed', detail: 'completed: the hook found the outcome and stored it' }])
    expect(second).toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining('was already called (completed, being stored)') as unknown })
    const replay = await engineOn(db).engine.begin({ scope, key: 'late-landing', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"id":"ch_late"}')
  })

  it('a complete whose write failed stored nothing: the hook may call it again once the database is back', async () => {
    const scope = newScope()
    await deadClaim(scope, 'second-try')
    let firstError: unknown
    let proxied: TcpProxy | undefined
    const reports = await reconcileThroughProxy({
      hookDeadlineMs: 20_000,
      hook: async (stuck) => {
        if (stuck.scope !== scope) return
        // The database goes away: the write is retried for as long as the lease allows, then given up.
        proxied?.cut()
        firstError = await stuck.complete(jsonResponse(201, '{"try":1}')).catch((error: unknown) => error)
        proxied?.restore()
        await stuck.complete(jsonResponse(201, '{"try":2}'))
      },
      arm: (proxy) => void (proxied = proxy),
    })
    expect(firstError).toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })
    expect(reports.filter((r) => r.scope === scope)).toMatchObject([{ key: 'second-try', decision: 'completed' }])
    const replay = await engineOn(db).engine.begin({ scope, key: 'second-try', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"try":2}')
  })

  it('refuses a hookDeadlineMs that is not a positive integer', async () => {
    const { engine } = engineOn(db, { staleAfterMs: STALE })
    const error: unknown = await reconcileStuckClaims({ engine, database: { pool: db.pool, schema: db.schema }, hook: async () => {}, hookDeadlineMs: 0 }).catch((caught: unknown) => caught)
    expect(isOncelyError(error, 'ONCELY_INVALID_OPTION') && error.message).toMatch(/hookDeadlineMs/)
  })
})
