import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, isOncelyError, OncelyError, type ClaimRequest, type Fence } from '../../src/index.js'
import { createPostgresStore, type PostgresStore } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { jsonResponse, keyTable } from '../helpers/engine.js'

// A claim attempt the engine gave up on (its answer lost, a transient error in its place) can
// still land. The engine may learn of it through `onLateInsert`: while `begin` runs, its next
// attempt recognises the row as its own; once `begin` has ended without owning the key, the
// late claim is released, so a request answered 503 leaves nothing behind (issue 13: the
// release paths of claim.ts had no in-process test). Without that word, it is let go by its
// token in the background all the same (issue 22; test/engine/orphan-claim.test.ts).
let db: TestDatabase
let store: PostgresStore
beforeAll(async () => {
  db = await createTestDatabase()
  store = createPostgresStore({ pool: db.pool, schema: db.schema })
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 11 } })
const lost = () => new OncelyError('ONCELY_STORE_UNAVAILABLE', 'the answer to the claim was lost')
const rowsOf = async (key: string) =>
  (await db.pool.query<{ fence_token: string; status: string }>(`SELECT fence_token, status FROM ${keyTable(db)} WHERE key = $1`, [key])).rows

/** The real store, with `claim` and `release` replaced by the test's own. */
function storeWith(overrides: { claim(request: ClaimRequest): ReturnType<PostgresStore['claim']>; release?(fence: Fence): Promise<boolean> }) {
  return { ...store, ...overrides }
}

describe('a claim that lands after its attempt was given up on', () => {
  it('lands after begin gave up with a 503: the claim it left is released', async () => {
    const key = 'late-after-503'
    let token: string | undefined
    const released = deferred<Fence>()
    const engine = createEngine({
      claimRetryMs: 1,
      store: storeWith({
        async claim(request) {
          // The insert commits, but its answer never reaches the engine, nor does `onLateInsert`
          // (pg drops an answer that comes after its query_timeout): the engine lets the claim
          // go by its token all the same, since its attempt failed with an error that can hide one.
          await store.claim(request)
          token = request.fenceToken
          throw lost()
        },
        async release(fence) {
          const deleted = await store.release(fence)
          released.resolve(fence)
          return deleted
        },
      }),
    })
    const error = await engine.begin({ scope: 'u1', key, fingerprint }).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    expect((await released.promise).fenceToken).toBe(token)
    expect(await rowsOf(key)).toEqual([])
  })

  it('lands after begin answered 409: the claim it left is released', async () => {
    const key = 'late-after-409'
    const owner = await createEngine({ store }).begin({ scope: 'u1', key, fingerprint })
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    let landed: (() => void) | undefined
    let calls = 0
    const released = deferred<Fence>()
    const engine = createEngine({
      store: storeWith({
        async claim(request) {
          if (calls++ === 0) {
            landed = request.onLateInsert
            throw lost()
          }
          return store.claim(request)
        },
        async release(fence) {
          released.resolve(fence)
          return store.release(fence)
        },
      }),
    })
    expect((await engine.begin({ scope: 'u1', key, fingerprint })).kind).toBe('conflict')
    landed?.()
    const fence = await released.promise
    expect(fence).toMatchObject({ scope: 'u1', key })
    await owner.execution.complete(jsonResponse(201, '{}'))
  })

  it('landed while begin still ran, which then gave up with a 503: the claim it left is released', async () => {
    const key = 'late-then-503'
    const released = deferred<Fence>()
    const engine = createEngine({
      claimRetryMs: 1,
      store: storeWith({
        async claim(request) {
          await store.claim(request)
          request.onLateInsert?.()
          throw lost()
        },
        async release(fence) {
          const deleted = await store.release(fence)
          released.resolve(fence)
          return deleted
        },
      }),
    })
    const error = await engine.begin({ scope: 'u1', key, fingerprint }).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    await released.promise
    expect(await rowsOf(key)).toEqual([])
  })

  it('landed while begin still ran, which then ended without the key: it releases its own token only', async () => {
    const key = 'late-then-replay'
    // Someone else's request completes the key first.
    const other = await createEngine({ store }).begin({ scope: 'u1', key, fingerprint })
    if (other.kind !== 'execute') throw new Error(other.kind)
    await other.execution.complete(jsonResponse(201, '{"other":true}'))
    const released = deferred<Fence>()
    let calls = 0
    const engine = createEngine({
      store: storeWith({
        async claim(request) {
          // The first attempt's insert is reported late and its answer lost; the next finds the completed key.
          if (calls++ === 0) {
            request.onLateInsert?.()
            throw lost()
          }
          return store.claim(request)
        },
        async release(fence) {
          released.resolve(fence)
          return store.release(fence)
        },
      }),
    })
    const decision = await engine.begin({ scope: 'u1', key, fingerprint })
    expect(decision.kind).toBe('replay')
    const fence = await released.promise
    expect(fence).toMatchObject({ scope: 'u1', key })
    const [row] = await rowsOf(key)
    expect(fence.fenceToken).not.toBe(row?.fence_token)
    expect(row?.status).toBe('completed')
  })

  it('landed while begin still ran, which then owned the key: nothing is released', async () => {
    const key = 'late-then-owned'
    let releases = 0
    let calls = 0
    const engine = createEngine({
      store: storeWith({
        async claim(request) {
          if (calls++ === 0) {
            await store.claim(request)
            request.onLateInsert?.()
            throw lost()
          }
          return store.claim(request)
        },
        async release(fence) {
          releases++
          return store.release(fence)
        },
      }),
    })
    const decision = await engine.begin({ scope: 'u1', key, fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    await decision.execution.complete(jsonResponse(201, '{}'))
    expect(releases).toBe(0)
    expect((await rowsOf(key))[0]?.status).toBe('completed')
  })
})
