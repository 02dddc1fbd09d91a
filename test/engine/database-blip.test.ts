import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, isOncelyError, type Execution } from '../../src/index.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'

let db: TestDatabase
let proxy: TcpProxy
let pool: pg.Pool
beforeAll(async () => {
  db = await createTestDatabase()
  proxy = await startTcpProxy(db.url)
  pool = new pg.Pool({ connectionString: proxy.url, max: 25, connectionTimeoutMillis: 1000 })
  // Idle connections are cut with the proxy: the pool reports it, the store's statements retry.
  pool.on('error', () => undefined)
})
afterAll(async () => {
  await pool.end()
  await proxy.close()
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 7 } })

async function statuses(scope: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ status: string }>(`SELECT status FROM ${keyTable(db)} WHERE scope = $1 ORDER BY key`, [scope])
  return rows.map((row) => row.status)
}

describe('the database away at completion (issue 8, path 4)', () => {
  it('20 charges in flight, the database gone for a second: every completion lands once it is back, every key replays', async () => {
    const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }) })
    const keys = Array.from({ length: 20 }, (_, i) => `blip-${i}`)
    const executions: Array<Execution<Queryable>> = []
    for (const key of keys) {
      const decision = await engine.begin({ scope: 'blip', key, fingerprint })
      if (decision.kind !== 'execute') throw new Error(decision.kind)
      await decision.execution.step('charge', async ({ providerKey }) => ({ id: `ch_${providerKey.slice(0, 8)}` }))
      executions.push(decision.execution)
    }
    proxy.cut()
    const completions = executions.map((execution, i) => execution.complete(jsonResponse(201, `{"n":${i}}`)))
    const restored = new Promise<void>((resolve) =>
      setTimeout(() => {
        proxy.restore()
        resolve()
      }, 1000),
    )
    await Promise.all([...completions, restored])
    expect(executions.map((execution) => execution.state)).toEqual(keys.map(() => 'completed'))
    expect(await statuses('blip')).toEqual(keys.map(() => 'completed'))
    const { engine: direct } = engineOn(db)
    for (const [i, key] of keys.entries()) {
      const replay = await direct.begin({ scope: 'blip', key, fingerprint })
      expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe(`{"n":${i}}`)
    }
  })

  it('gone for longer than the lease: the completion gives up with ONCELY_STORE_UNAVAILABLE and the owner stops renewing, so a retry takes over', async () => {
    const timing = { staleAfterMs: 1500, leaseRenewMs: 300, ttlMs: 60_000 }
    const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }), ...timing })
    const decision = await engine.begin({ scope: 'away', key: 'away-1', fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    const { execution } = decision
    await execution.step('charge', async () => ({ id: 'ch_away' }))
    proxy.cut()
    const error: unknown = await execution.complete(jsonResponse(201, '{}')).catch((e: unknown) => e)
    proxy.restore()
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    expect(execution.state).toBe('lost')
    await expect(execution.complete(jsonResponse(201, '{}'))).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })

    // The database is back, the owner's process lives on: its lease must not be renewed.
    const { engine: retry } = engineOn(db, timing)
    let taken: Execution<Queryable> | undefined
    for (let attempt = 0; attempt < 50 && taken === undefined; attempt++) {
      const next = await retry.begin({ scope: 'away', key: 'away-1', fingerprint })
      if (next.kind === 'execute') taken = next.execution
      else await new Promise((resolve) => setTimeout(resolve, 100))
    }
    expect(taken?.how).toBe('take-over')
    expect(taken?.recoveryPoint).toBe('charge')
    await taken?.complete(jsonResponse(201, '{}'))
  })
})
