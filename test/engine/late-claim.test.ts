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

  it('reported only after begin owned the key (the given-up answer arrives after the retry found the row): the claim is kept, the key runs once', async () => {
    const key = 'late-report-after-owned'
    let reportLate: (() => void) | undefined
    const releases: Fence[] = []
    let calls = 0
    const engine = createEngine({
      store: storeWith({
        async claim(request) {
          // The first attempt's insert commits but its answer is late; the retry finds the row,
          // made with its own token, and owns the key. Only then does the late answer arrive.
          if (calls++ === 0) {
            await store.claim(request)
            reportLate = request.onLateInsert
            throw lost()
          }
          return store.claim(request)
        },
        async release(fence) {
          releases.push(fence)
          return store.release(fence)
        },
      }),
    })
    const decision = await engine.begin({ scope: 'u1', key, fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    reportLate?.()
    expect(releases).toEqual([])
    // The claim is still held: a retry now is a conflict, not a second run.
    expect((await createEngine({ store }).begin({ scope: 'u1', key, fingerprint })).kind).toBe('conflict')
    await decision.execution.complete(jsonResponse(201, '{}'))
    expect((await rowsOf(key))[0]?.status).toBe('completed')
    expect(releases).toEqual([])
  })

  it('an attempt that failed with an error that is not transient, reported landed after begin threw: its claim is released', async () => {
    const key = 'late-after-not-transient'
    let reportLate: (() => void) | undefined
    let token: string | undefined
    const released = deferred<Fence>()
    const engine = createEngine({
      store: storeWith({
        async claim(request) {
          await store.claim(request)
          token = request.fenceToken
          reportLate = request.onLateInsert
          throw new Error('not a database error: begin throws it at once')
        },
        async release(fence) {
          const deleted = await store.release(fence)
          released.resolve(fence)
          return deleted
        },
      }),
    })
    await expect(engine.begin({ scope: 'u1', key, fingerprint })).rejects.toThrow(/not a database error/)
    expect(await rowsOf(key)).toHaveLength(1)
    reportLate?.()
    expect((await released.promise).fenceToken).toBe(token)
    expect(await rowsOf(key)).toEqual([])
  })

  it('reported landed while begin ran, whose attempt then found another claim (409, no transient error): its own token is let go', async () => {
    const key = 'late-report-then-409'
    const owner = await createEngine({ store }).begin({ scope: 'u1', key, fingerprint })
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    let token: string | undefined
    const released = deferred<Fence>()
    const engine = createEngine({
      store: storeWith({
        async claim(request) {
          token = request.fenceToken
          request.onLateInsert?.()
          return store.claim(request)
        },
        async release(fence) {
          released.resolve(fence)
          return store.release(fence)
        },
      }),
    })
    expect((await engine.begin({ scope: 'u1', key, fingerprint })).kind).toBe('conflict')
    expect((await released.promise).fenceToken).toBe(token)
    await owner.execution.complete(jsonResponse(201, '{}'))
  })
})

describe('a begin that ends without the key, with no attempt in doubt', () => {
  /** The real store, counting the calls that let a claim go or take one over. */
  function countingStore() {
    const calls = { release: 0, suspend: 0, takeOver: 0 }
    return {
      calls,
      store: {
        ...store,
        async release(fence: Fence) {
          calls.release++
          return store.release(fence)
        },
        async suspend(fence: Fence) {
          calls.suspend++
          return store.suspend(fence)
        },
        takeOver(...args: Parameters<PostgresStore['takeOver']>) {
          calls.takeOver++
          return store.takeOver(...args)
        },
      },
    }
  }

  it('a 409 on a live claim: no take-over is tried and nothing is let go', async () => {
    const key = 'plain-409'
    const owner = await createEngine({ store }).begin({ scope: 'u1', key, fingerprint })
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    const { calls, store: counting } = countingStore()
    expect((await createEngine({ store: counting }).begin({ scope: 'u1', key, fingerprint })).kind).toBe('conflict')
    // A let-go starts at once (its first try is synchronous); none may start at all.
    await new Promise((resolve) => setImmediate(resolve))
    expect(calls).toEqual({ release: 0, suspend: 0, takeOver: 0 })
    await owner.execution.complete(jsonResponse(201, '{}'))
  })

  it('a replay: nothing is let go', async () => {
    const key = 'plain-replay'
    const owner = await createEngine({ store }).begin({ scope: 'u1', key, fingerprint })
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    await owner.execution.complete(jsonResponse(201, '{}'))
    const { calls, store: counting } = countingStore()
    expect((await createEngine({ store: counting }).begin({ scope: 'u1', key, fingerprint })).kind).toBe('replay')
    await new Promise((resolve) => setImmediate(resolve))
    expect(calls).toEqual({ release: 0, suspend: 0, takeOver: 0 })
  })
})
