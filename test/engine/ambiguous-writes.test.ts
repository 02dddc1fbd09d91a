import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import type { Execution } from '../../src/engine/execution.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { ageClaim, engineOn, jsonResponse, keyTable } from '../helpers/engine.js'

let db: TestDatabase
let proxy: TcpProxy
let pool: pg.Pool
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE charges (id text PRIMARY KEY)')
  proxy = await startTcpProxy(db.url)
  pool = new pg.Pool({ connectionString: proxy.url, max: 5 })
  pool.on('error', () => undefined)
})
afterAll(async () => {
  await pool.end()
  await proxy.close()
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 9 } })
const engine = () => createEngine({ store: createPostgresStore({ pool, schema: db.schema }), staleAfterMs: 60_000 })
const input = (key: string) => ({ scope: 'u1', key, fingerprint })

/** Executions of `keys`, claimed one after another on one engine (one store, so their writes can batch). */
async function ownedOnOneEngine(keys: string[]) {
  const shared = engine()
  const executions = []
  for (const key of keys) {
    const decision = await shared.begin(input(key))
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    executions.push(decision.execution)
  }
  return executions
}

async function begin(key: string) {
  const decision = await engine().begin(input(key))
  if (decision.kind !== 'execute') throw new Error(`expected execute, got ${decision.kind}`)
  return decision.execution
}

// Issue 8, path 16: a write committed, its answer lost with the connection. The worker must
// recognise its own write by the token it minted, never see it as someone else's.
describe('a write whose answer was lost is recognised as this worker’s own (issue 8, path 16)', () => {
  it('the claim: the retry finds its own claim, not a conflict', async () => {
    const cut = proxy.cutNextAnswer({ to: '_claim' })
    const execution = await begin('lost-claim')
    await cut
    expect(execution.how).toBe('new')
    await execution.complete(jsonResponse(201, '{}'))
  })

  it('a step: committed once, the worker goes on', async () => {
    const execution = await begin('lost-step')
    const cut = proxy.cutNextAnswer({ to: '_commit_step' })
    expect(await execution.step('charge', async () => ({ id: 'ch_1' }))).toEqual({ id: 'ch_1' })
    await cut
    expect(execution.recoveryPoint).toBe('charge')
    await execution.complete(jsonResponse(201, '{}'))
  })

  it('the completion: ends completed, not lock lost', async () => {
    const execution = await begin('lost-complete')
    const cut = proxy.cutNextAnswer({ to: '_complete' })
    await execution.complete(jsonResponse(201, '{"ok":true}'))
    await cut
    expect(execution.state).toBe('completed')
  })

  it('the COMMIT of the completion transaction: the business writes are not run again, the value comes back', async () => {
    const execution = await begin('lost-commit')
    let runs = 0
    const cut = proxy.cutNextAnswer({ to: 'COMMIT' })
    const value = await execution.completeInTransaction(async (tx) => {
      runs++
      await tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: ['ch_commit'] })
      return { response: jsonResponse(201, '{}'), value: 'ch_commit' }
    })
    await cut
    expect({ value, runs, state: execution.state }).toEqual({ value: 'ch_commit', runs: 1, state: 'completed' })
  })

  it('a batch of claims (issue 21): each retry finds its own claim, not a conflict', async () => {
    // One engine, one store: the first claim leaves alone, the three behind it as one batch, whose answer is cut.
    const shared = engine()
    const cut = proxy.cutNextAnswer({ to: '_claim_batch' })
    const decisions = await Promise.all(['lost-batch-0', 'lost-batch-1', 'lost-batch-2', 'lost-batch-3'].map((key) => shared.begin(input(key))))
    await cut
    expect(decisions.map((decision) => decision.kind === 'execute' && decision.execution.how)).toEqual(['new', 'new', 'new', 'new'])
    for (const decision of decisions) if (decision.kind === 'execute') await decision.execution.complete(jsonResponse(201, '{}'))
  })

  it('a batch of completions (issue 21): each ends completed, not lock lost', async () => {
    const executions = await ownedOnOneEngine(['lost-completes-0', 'lost-completes-1', 'lost-completes-2'])
    const cut = proxy.cutNextAnswer({ to: '_complete_batch' })
    await Promise.all(executions.map((execution) => execution.complete(jsonResponse(201, '{"ok":true}'))))
    await cut
    expect(executions.map((execution) => execution.state)).toEqual(['completed', 'completed', 'completed'])
    const { rows } = await db.pool.query(`SELECT key, status FROM ${keyTable(db)} WHERE key LIKE 'lost-completes-%' ORDER BY key`)
    expect(rows.map((row: { status: string }) => row.status)).toEqual(['completed', 'completed', 'completed'])
  })

  it('a batch of step commits, and one of at-most-once step marks (issue 21): each step runs once, each worker goes on with its result', async () => {
    const executions = await ownedOnOneEngine(['lost-steps-0', 'lost-steps-1', 'lost-steps-2'])
    const runs = new Map<string, number>()
    const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1)
    // The first of each kind leaves alone, the two behind it as one batch, whose answer is cut.
    const cutMarks = proxy.cutNextAnswer({ to: '_mark_step_started_batch' })
    await Promise.all(executions.map((execution) => execution.step('email', () => void ran(`email ${execution.key}`), { delivery: 'at-most-once' })))
    await cutMarks
    const cutCommits = proxy.cutNextAnswer({ to: '_commit_step_batch' })
    const results = await Promise.all(executions.map((execution) => execution.step('charge', () => (ran(`charge ${execution.key}`), { id: `ch_${execution.key}` }))))
    await cutCommits
    expect(results).toEqual(executions.map((execution) => ({ id: `ch_${execution.key}` })))
    expect([...runs.values()]).toEqual([1, 1, 1, 1, 1, 1])
    for (const execution of executions) await execution.complete(jsonResponse(201, '{}'))
    const { rows } = await db.pool.query<{ status: string; recovery_point: string; started_steps: string[]; step_results: unknown }>(
      `SELECT status, recovery_point, started_steps, step_results FROM ${keyTable(db)} WHERE key LIKE 'lost-steps-%' ORDER BY key`,
    )
    // The marks sent again after their answer was lost record the step once (an at-most-once step's result, undefined, is stored as null).
    expect(rows).toEqual(executions.map((execution) => ({ status: 'completed', recovery_point: 'charge', started_steps: ['email'], step_results: { email: null, charge: { id: `ch_${execution.key}` } } })))
  })

  it("a step batch cut while an execution's parallel step waits behind it for its row: both steps of that execution land, each run once", async () => {
    const executions = await ownedOnOneEngine(['lost-parallel-0', 'lost-parallel-1', 'lost-parallel-2'])
    const [lead, both, other] = executions as [Execution<Queryable>, Execution<Queryable>, Execution<Queryable>]
    const runs: string[] = []
    // lead's commit leaves alone; both's 'x' and other's 'x' leave as a batch, whose answer is cut;
    // both's 'y', the same row, was waiting to go after that batch, and fails with it unsent.
    const cut = proxy.cutNextAnswer({ to: '_commit_step_batch' })
    const step = (execution: Execution<Queryable>, name: string) => execution.step(name, () => (runs.push(`${execution.key} ${name}`), { name }))
    expect(await Promise.all([step(lead, 'x'), step(both, 'x'), step(both, 'y'), step(other, 'x')])).toEqual([{ name: 'x' }, { name: 'x' }, { name: 'y' }, { name: 'x' }])
    await cut
    expect(runs.toSorted()).toEqual(['lost-parallel-0 x', 'lost-parallel-1 x', 'lost-parallel-1 y', 'lost-parallel-2 x'])
    for (const execution of executions) await execution.complete(jsonResponse(201, '{}'))
    const { rows } = await db.pool.query<{ key: string; step_results: unknown }>(`SELECT key, step_results FROM ${keyTable(db)} WHERE key LIKE 'lost-parallel-%' ORDER BY key`)
    expect(rows).toEqual([
      { key: 'lost-parallel-0', step_results: { x: { name: 'x' } } },
      { key: 'lost-parallel-1', step_results: { x: { name: 'x' }, y: { name: 'y' } } },
      { key: 'lost-parallel-2', step_results: { x: { name: 'x' } } },
    ])
  })

  it('a take-over: the retry owns the claim it took', async () => {
    const { engine: direct } = engineOn(db)
    const dead = await direct.begin(input('lost-take-over'))
    if (dead.kind !== 'execute') throw new Error(dead.kind)
    await ageClaim(db, 'u1', 'lost-take-over')
    const cut = proxy.cutNextAnswer({ to: '_take_over' })
    const taker = await begin('lost-take-over')
    await cut
    expect(taker.how).toBe('take-over')
    await taker.complete(jsonResponse(201, '{}'))
    const { rows } = await db.pool.query(`SELECT status FROM ${keyTable(db)} WHERE key = 'lost-take-over'`)
    expect(rows).toEqual([{ status: 'completed' }])
  })
})
