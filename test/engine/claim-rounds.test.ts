import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, OncelyError, type IdempotencyStore } from '../../src/index.js'
import { createPostgresStore, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, jsonResponse, keyTable, storeClaim } from '../helpers/engine.js'

// claim.ts's rounds on the real store, with one of its statements replaced to lose a race or an
// answer at a chosen point (issue 13: the mutants these kill survived the rest of the suite).
let db: TestDatabase
let store: PostgresStore
beforeAll(async () => {
  db = await createTestDatabase()
  store = createPostgresStore({ pool: db.pool, schema: db.schema })
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 12 } })
const lost = () => new OncelyError('ONCELY_STORE_UNAVAILABLE', 'the answer was lost')
const engineOver = (overrides: Partial<IdempotencyStore<Queryable>>, options: { claimRetryMs?: number; conflictRetryAfterSeconds?: number } = {}) =>
  createEngine({ ...options, store: { ...store, ...overrides } })

/** A completed key whose time to live has run out. */
async function expiredKey(key: string): Promise<void> {
  const first = await createEngine({ store }).begin({ scope: 'u1', key, fingerprint })
  if (first.kind !== 'execute') throw new Error(first.kind)
  await first.execution.complete(jsonResponse(201, '{}'))
  await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 second' WHERE key = $1`, [key])
}

/** An in-progress claim whose owner is gone: stale, takeable. */
async function abandonedKey(key: string): Promise<void> {
  await storeClaim(store, { scope: 'u1', key, fingerprint })
  await ageClaim(db, 'u1', key)
}

describe('the rounds of a claim', () => {
  it('a live claim answers 409 with the configured Retry-After, in whole seconds', async () => {
    const owner = await createEngine({ store }).begin({ scope: 'u1', key: 'held', fingerprint })
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    expect(await engineOver({}, { conflictRetryAfterSeconds: 5 }).begin({ scope: 'u1', key: 'held', fingerprint })).toEqual({ kind: 'conflict', retryAfterSeconds: 5 })
    await owner.execution.complete(jsonResponse(201, '{}'))
  })

  it('gives up after three claims in a row find the key changed under them', async () => {
    await expiredKey('always-reclaimed')
    let claims = 0
    let reads = 0
    const engine = engineOver({
      async claim(request) {
        claims++
        return store.claim(request)
      },
      // Someone else reclaims it first, every time.
      async reclaimExpired() {
        return null
      },
      // A reclaim lost without doubt costs no read-back.
      async read(scope, key) {
        reads++
        return store.read(scope, key)
      },
    })
    const error = await engine.begin({ scope: 'u1', key: 'always-reclaimed', fingerprint }).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: 'ONCELY_STORE_UNEXPECTED', message: 'the key "always-reclaimed" changed under 3 claims in a row' })
    expect(claims).toBe(3)
    expect(reads).toBe(0)
  })

  it('a take-over lost to another retry is a 409 without a read-back; one whose answer was lost is read back and recognised', async () => {
    await abandonedKey('lost-take-over')
    let reads = 0
    const counting = { async read(scope: string, key: string) { reads++; return store.read(scope, key) } }
    const lostRace = engineOver({ ...counting, async takeOver() { return null } }, { conflictRetryAfterSeconds: 7 })
    expect(await lostRace.begin({ scope: 'u1', key: 'lost-take-over', fingerprint })).toEqual({ kind: 'conflict', retryAfterSeconds: 7 })
    expect(reads).toBe(0)

    let first = true
    const lostAnswer = engineOver({
      ...counting,
      async takeOver(seen, take) {
        const taken = await store.takeOver(seen, take)
        if (first) {
          first = false
          throw lost()
        }
        return taken
      },
    })
    const decision = await lostAnswer.begin({ scope: 'u1', key: 'lost-take-over', fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    expect(decision.execution.how).toBe('take-over')
    expect(reads).toBe(1)
    await decision.execution.complete(jsonResponse(201, '{}'))
  })

  it('a reclaim whose answer was lost is read back and recognised as the reclaim it was', async () => {
    await expiredKey('lost-reclaim')
    let first = true
    const engine = engineOver({
      async reclaimExpired(seen, input) {
        const fresh = await store.reclaimExpired(seen, input)
        if (first) {
          first = false
          throw lost()
        }
        return fresh
      },
    })
    const decision = await engine.begin({ scope: 'u1', key: 'lost-reclaim', fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    expect(decision.execution.how).toBe('reclaimed-expired')
    await decision.execution.complete(jsonResponse(201, '{}'))
  })

  it('a read-back after a lost answer that cannot be made names the read-back', async () => {
    const away = async () => {
      throw lost()
    }
    const lostOnce = <A extends unknown[], R>(real: (...args: A) => Promise<R>) => {
      let first = true
      return async (...args: A) => {
        const result = await real(...args)
        if (first) {
          first = false
          throw lost()
        }
        return result
      }
    }
    await abandonedKey('read-back-take-over')
    const takeOver = await engineOver({ takeOver: lostOnce((seen: Parameters<PostgresStore['takeOver']>[0], take: Parameters<PostgresStore['takeOver']>[1]) => store.takeOver(seen, take)), read: away }, { claimRetryMs: 200 })
      .begin({ scope: 'u1', key: 'read-back-take-over', fingerprint })
      .catch((e: unknown) => e)
    expect((takeOver as Error).message).toMatch(/^read-back: the database stayed unavailable/)
    await expiredKey('read-back-reclaim')
    const reclaim = await engineOver({ reclaimExpired: lostOnce((seen: Parameters<PostgresStore['reclaimExpired']>[0], input: Parameters<PostgresStore['reclaimExpired']>[1]) => store.reclaimExpired(seen, input)), read: away }, { claimRetryMs: 200 })
      .begin({ scope: 'u1', key: 'read-back-reclaim', fingerprint })
      .catch((e: unknown) => e)
    expect((reclaim as Error).message).toMatch(/^read-back: the database stayed unavailable/)
  })

  it('a database that stays away names the statement that could not run', async () => {
    const away = async () => {
      throw lost()
    }
    const claimAway = await engineOver({ claim: away }, { claimRetryMs: 1 }).begin({ scope: 'u1', key: 'away-claim', fingerprint }).catch((e: unknown) => e)
    expect((claimAway as Error).message).toMatch(/^claim of key "away-claim": the database stayed unavailable/)
    await abandonedKey('away-take-over')
    const takeOverAway = await engineOver({ takeOver: away }, { claimRetryMs: 1 }).begin({ scope: 'u1', key: 'away-take-over', fingerprint }).catch((e: unknown) => e)
    expect((takeOverAway as Error).message).toMatch(/^take-over of key "away-take-over": the database stayed unavailable/)
    await expiredKey('away-reclaim')
    const reclaimAway = await engineOver({ reclaimExpired: away }, { claimRetryMs: 1 }).begin({ scope: 'u1', key: 'away-reclaim', fingerprint }).catch((e: unknown) => e)
    expect((reclaimAway as Error).message).toMatch(/^reclaim of key "away-reclaim": the database stayed unavailable/)
  })
})
