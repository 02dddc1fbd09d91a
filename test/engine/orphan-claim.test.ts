import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, isOncelyError, type Fence } from '../../src/index.js'
import { createPostgresStore, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { deferred } from '../helpers/deferred.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// Issue 22, point 3: a claim statement that reaches the database after its begin gave up on it
// (here held in a real proxy, its client timed out and gone) lands as a claim nobody owns. Before,
// it answered 409 for the whole stale window after the 503, and its taker was marked as if side
// effects may have happened. Nobody ever held its token, so nobody can have acted on it: the
// engine lets it go in the background.
let db: TestDatabase
let proxy: TcpProxy
let pool: pg.Pool
beforeAll(async () => {
  db = await createTestDatabase()
  proxy = await startTcpProxy(db.url)
  pool = new pg.Pool({ connectionString: proxy.url, max: 4, connectionTimeoutMillis: 2000 })
  pool.on('error', () => undefined)
})
afterAll(async () => {
  await pool.end()
  await proxy.close()
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 23 } })
const input = (key: string) => ({ scope: 'u1', key, fingerprint })

/**
 * An engine on the proxied pool that gives a claim up after one timed-out attempt; `letGo`
 * resolves with the fence of the first claim it let go. `onRefusedRelease` runs before a release
 * that found nothing to delete answers.
 */
function givingUpEngine(onRefusedRelease?: () => Promise<void>) {
  const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 400, lockTimeoutMs: 300 })
  const letGo = deferred<{ how: 'released' | 'suspended'; fence: Fence }>()
  const watched: PostgresStore = {
    ...store,
    release: async (fence) => {
      const done = await store.release(fence)
      if (done) letGo.resolve({ how: 'released', fence })
      else await onRefusedRelease?.()
      return done
    },
    suspend: async (fence, error) => {
      const done = await store.suspend(fence, error)
      if (done) letGo.resolve({ how: 'suspended', fence })
      return done
    },
  }
  return { engine: createEngine<Queryable>({ store: watched, staleAfterMs: 60_000, claimRetryMs: 1 }), letGo: letGo.promise }
}

async function rowOf(key: string) {
  const { rows } = await db.pool.query<{ fence_token: string | null; interrupted: boolean }>(
    `SELECT fence_token::text, interrupted FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

describe('a claim statement that lands after its begin answered 503', () => {
  it('a new claim: deleted by its own token; the next retry runs as new, unmarked', async () => {
    const key = 'orphan-new'
    const { engine, letGo } = givingUpEngine()
    const late = proxy.holdNext('_claim')
    const error: unknown = await engine.begin(input(key)).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    await late.held
    expect(await rowOf(key)).toBeUndefined()
    late.release()
    const { how, fence } = await letGo
    expect({ how, key: fence.key }).toEqual({ how: 'released', key })
    expect(await rowOf(key)).toBeUndefined()
    const retry = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
    expect({ how: retry.how, sideEffectsPossible: retry.sideEffectsPossible }).toEqual({ how: 'new', sideEffectsPossible: false })
    await retry.complete(jsonResponse(201, '{}'))
  })

  it('a new claim landing just after a release found nothing is released by the next try, never suspended', async () => {
    const key = 'orphan-new-between'
    const late = proxy.holdNext('_claim')
    let landed = false
    // The held claim lands right after the first release found no row, where a suspend used to
    // follow in the same try and mark a fresh claim as if something may have run.
    const { engine, letGo } = givingUpEngine(async () => {
      if (landed) return
      landed = true
      late.release()
      for (let n = 0; n < 200 && (await rowOf(key)) === undefined; n++) await new Promise((resolve) => setTimeout(resolve, 10))
    })
    const error: unknown = await engine.begin(input(key)).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    const { how } = await letGo
    expect(landed).toBe(true)
    expect(how).toBe('released')
    expect(await rowOf(key)).toBeUndefined()
  })

  it('a take-over: suspended by its own token, so the next retry takes it over at once', async () => {
    const key = 'orphan-take-over'
    const { engine: direct } = engineOn(db, { staleAfterMs: 60_000 })
    owned(await direct.begin(input(key)))
    await ageClaim(db, 'u1', key)
    const { engine, letGo } = givingUpEngine()
    const late = proxy.holdNext('_take_over')
    const error: unknown = await engine.begin(input(key)).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    await late.held
    late.release()
    const { how, fence } = await letGo
    expect(how).toBe('suspended')
    expect(await rowOf(key)).toEqual({ fence_token: null, interrupted: true })
    expect(fence.key).toBe(key)
    const retry = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
    expect(retry.how).toBe('take-over')
    await retry.complete(jsonResponse(201, '{}'))
  })
})

describe('the let-go of a claim nobody owns, while the database refuses it', () => {
  it('tries with a backoff doubling from 50 ms up to leaseRenewMs, and no try starts past staleAfterMs', async () => {
    const staleAfterMs = 1200
    const leaseRenewMs = 400
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const tries: number[] = []
    const refusing: PostgresStore = {
      ...store,
      async claim(request) {
        await store.claim(request)
        throw Object.assign(new Error('the answer to the claim was lost'), { code: '57P01' })
      },
      // The database stays away for the let-go: every try fails, so it goes on until its window ends.
      async release() {
        tries.push(performance.now())
        throw Object.assign(new Error('the database is away'), { code: '57P01' })
      },
    }
    const engine = createEngine<Queryable>({ store: refusing, staleAfterMs, leaseRenewMs, claimRetryMs: 1 })
    const error: unknown = await engine.begin(input('orphan-window')).catch((e: unknown) => e)
    const endedAt = performance.now()
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    // Past the window by two of the longest delays: a let-go that did not stop would still try.
    await new Promise((resolve) => setTimeout(resolve, staleAfterMs + 2 * leaseRenewMs + 200))
    // At 0, 50, 150, 350, 750 and 1150 ms, the next one (1550) past the window: six tries, fewer
    // on a machine whose timers fire late, never more.
    expect(tries.length).toBeGreaterThanOrEqual(2)
    expect(tries.length).toBeLessThanOrEqual(6)
    const gaps = tries.slice(1).map((at, i) => at - tries[i]!)
    for (const [i, gap] of gaps.entries()) expect(gap, `gap ${i}`).toBeGreaterThanOrEqual(Math.min(50 * 2 ** i, leaseRenewMs) - 2)
    // A try is only scheduled to start within the window; 200 ms of slack for a late timer.
    for (const at of tries) expect(at - endedAt).toBeLessThan(staleAfterMs + 200)
  })
})
