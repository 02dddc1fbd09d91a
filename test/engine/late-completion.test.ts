import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { jsonResponse, keyTable, owned } from '../helpers/engine.js'

// Issue 22, point 3: a completion whose COMMIT reaches the database after its worker stopped
// waiting for it. The worker reads its row back (still in progress: the COMMIT has not landed)
// and sends the completion again; the late COMMIT lands while that repeat waits for the row it
// locked, so the repeat's fence fails on the worker's own completion. It must be recognised as
// the worker's own landing (its token and its outcome on the row), not reported as a take-over.
let db: TestDatabase
let proxy: TcpProxy
let pool: pg.Pool
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE landings (attempt integer NOT NULL)')
  proxy = await startTcpProxy(db.url)
  pool = new pg.Pool({ connectionString: proxy.url, max: 4, connectionTimeoutMillis: 2000 })
  pool.on('error', () => undefined)
})
afterAll(async () => {
  await pool.end()
  await proxy.close()
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 22 } })
// A short statement timeout, so the worker gives up on the held COMMIT quickly; a long lease, so
// it keeps retrying.
const engine = () => createEngine<Queryable>({ store: createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 400, lockTimeoutMs: 300 }), staleAfterMs: 60_000 })

async function rowOf(key: string) {
  const { rows } = await db.pool.query<{ status: string; fence_token: string; response_body: Buffer }>(
    `SELECT status, fence_token::text, response_body FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

describe('a completion whose COMMIT lands after its worker gave up waiting for it', () => {
  it('completeInTransaction: the late COMMIT is the worker’s own; the first attempt’s value comes back, its writes alone stay', async () => {
    const key = 'late-commit-transaction'
    const execution = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    // Held until the repeat's fenced completion reaches the database, then sent just before it.
    const late = proxy.holdNext('COMMIT', '_complete')
    let runs = 0
    const value = await execution.completeInTransaction(async (tx) => {
      const attempt = ++runs
      await tx.query({ text: 'INSERT INTO landings (attempt) VALUES ($1)', values: [attempt] })
      return { response: jsonResponse(201, `{"attempt":${attempt}}`), value: `attempt ${attempt}` }
    })
    await late.held
    expect({ value, state: execution.state, runs }).toEqual({ value: 'attempt 1', state: 'completed', runs: 2 })
    const { rows } = await db.pool.query<{ attempt: number }>('SELECT attempt FROM landings')
    expect(rows).toEqual([{ attempt: 1 }])
    const row = await rowOf(key)
    expect({ status: row?.status, token: row?.fence_token, body: row?.response_body.toString() }).toEqual({ status: 'completed', token: execution.fenceToken, body: '{"attempt":1}' })
  })

  it('complete with statements: the late flight is the worker’s own, and it ends completed', async () => {
    const key = 'late-commit-flight'
    const execution = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    const late = proxy.holdNext('COMMIT', '_complete')
    await execution.complete(jsonResponse(201, '{"flight":true}'), { statements: [{ text: 'INSERT INTO landings (attempt) VALUES ($1)', values: [100] }] })
    await late.held
    expect(execution.state).toBe('completed')
    const { rows } = await db.pool.query<{ attempt: number }>('SELECT attempt FROM landings WHERE attempt = 100')
    expect(rows).toEqual([{ attempt: 100 }])
    expect((await rowOf(key))?.fence_token).toBe(execution.fenceToken)
  })
})
