import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type IdempotencyStore, type StoredResponse } from '../../src/index.js'
import { createRedisCache, withRedisCache } from '../../src/redis/index.js'
import { createPostgresStore, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { redisForTests, testRedis } from '../redis/support/test-redis.js'

// A store written as a class (its methods on the prototype, its state in private fields), as a
// user's own store may well be, behind the store decorators: encryption at rest and the Redis
// cache. Each must keep every method it does not change and call it on the store itself, so a
// method reading a private field still works; a copy by object spread kept neither.
const print = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_class"}') }
const redis = await redisForTests()

/** Every port method forwarded to the PostgreSQL store held in a private field. */
class ClassStore implements IdempotencyStore<Queryable> {
  readonly #inner: PostgresStore
  calls = 0
  constructor(inner: PostgresStore) {
    this.#inner = inner
  }
  #count() {
    this.calls++
  }
  claim(...a: Parameters<PostgresStore['claim']>) { this.#count(); return this.#inner.claim(...a) }
  read(...a: Parameters<PostgresStore['read']>) { this.#count(); return this.#inner.read(...a) }
  takeOver(...a: Parameters<PostgresStore['takeOver']>) { this.#count(); return this.#inner.takeOver(...a) }
  reclaimExpired(...a: Parameters<PostgresStore['reclaimExpired']>) { this.#count(); return this.#inner.reclaimExpired(...a) }
  commitStep(...a: Parameters<PostgresStore['commitStep']>) { this.#count(); return this.#inner.commitStep(...a) }
  markStepStarted(...a: Parameters<PostgresStore['markStepStarted']>) { this.#count(); return this.#inner.markStepStarted(...a) }
  renewLease(...a: Parameters<PostgresStore['renewLease']>) { this.#count(); return this.#inner.renewLease(...a) }
  complete(...a: Parameters<PostgresStore['complete']>) { this.#count(); return this.#inner.complete(...a) }
  transaction<T>(work: (tx: Queryable) => Promise<T>) { this.#count(); return this.#inner.transaction(work) }
  release(...a: Parameters<PostgresStore['release']>) { this.#count(); return this.#inner.release(...a) }
  suspend(...a: Parameters<PostgresStore['suspend']>) { this.#count(); return this.#inner.suspend(...a) }
  isTransientError(error: unknown) { return this.#inner.isTransientError(error) }
}

describe('a class-based store behind the store decorators', () => {
  let db: TestDatabase
  let n = 0
  const newKey = () => `class-${n++}`
  /** A key run, with a step, completed, and then replayed, through an engine on `store`. */
  const runAndReplay = async (store: IdempotencyStore<Queryable>, encrypted: boolean) => {
    const engine = createEngine<Queryable>({ store, ...(encrypted ? { encryption: { keys: { A: randomBytes(32) }, current: 'A' } } : {}) })
    const key = newKey()
    const first = await engine.begin({ scope: 'u1', key, fingerprint: print })
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.step('charge', () => ({ providerCharge: 'pch_1' }))
    await first.execution.complete(response)
    const again = await engine.begin({ scope: 'u1', key, fingerprint: print })
    if (again.kind !== 'replay') throw new Error(again.kind)
    // A method no decorator changes (release), and the key free again after it.
    const other = newKey()
    const released = await engine.begin({ scope: 'u1', key: other, fingerprint: print })
    if (released.kind !== 'execute') throw new Error(released.kind)
    await released.execution.release()
    expect((await engine.begin({ scope: 'u1', key: other, fingerprint: print })).kind).toBe('execute')
    return again.response
  }

  beforeAll(async () => {
    db = await createTestDatabase()
  })
  afterAll(async () => {
    await db?.close()
  })

  it('keeps its methods and their `this` under encryption at rest', async () => {
    const store = new ClassStore(createPostgresStore({ pool: db.pool, schema: db.schema }))
    const replay = await runAndReplay(store, true)
    expect(replay.status).toBe(201)
    expect(replay.body.toString()).toBe('{"id":"ch_class"}')
    expect(store.calls).toBeGreaterThanOrEqual(4)
  })

  it('lists the members of the store it decorates, each enumerable, its constructor and Object.prototype left out', () => {
    const store = new ClassStore(createPostgresStore({ pool: db.pool, schema: db.schema }))
    const decorated = createEngine<Queryable>({ store, encryption: { keys: { A: randomBytes(32) }, current: 'A' } }).options.store
    const methods = Object.getOwnPropertyNames(ClassStore.prototype).filter((name) => name !== 'constructor')
    expect(Object.keys(decorated).sort()).toEqual(['calls', ...methods].sort())
    expect(Object.hasOwn(decorated, 'constructor')).toBe(false)
    expect(Object.isFrozen(decorated)).toBe(true)
  })

  it('reads a member that is not a function from the store each time, never a copy', async () => {
    const store = new ClassStore(createPostgresStore({ pool: db.pool, schema: db.schema }))
    const decorated = createEngine<Queryable>({ store, encryption: { keys: { A: randomBytes(32) }, current: 'A' } }).options.store as ClassStore
    expect(decorated.calls).toBe(0)
    await runAndReplay(decorated, false)
    expect(store.calls).toBeGreaterThanOrEqual(4)
    expect(decorated.calls).toBe(store.calls)
  })

  it('decorates a store with no prototype at all', async () => {
    const inner = createPostgresStore({ pool: db.pool, schema: db.schema })
    const bare: PostgresStore = Object.assign(Object.create(null) as object, inner)
    const replay = await runAndReplay(bare, true)
    expect(replay.body.toString()).toBe('{"id":"ch_class"}')
  })

  it.skipIf(!redis.run)('keeps its methods and their `this` behind the Redis cache, and under both', async () => {
    const client = await testRedis()
    try {
      const cache = createRedisCache({ redis: client.redis, secret: 'the secret of the class-store test', prefix: client.prefix, namespace: db.schema, staleAfterMs: 10_000 })
      for (const encrypted of [false, true]) {
        const store = new ClassStore(createPostgresStore({ pool: db.pool, schema: db.schema }))
        const cached = withRedisCache(store, cache)
        // The wrapper is typed as the store it wraps: the class's own members stay reachable.
        expect(cached.calls).toBe(0)
        const replay = await runAndReplay(cached, encrypted)
        expect(replay.status).toBe(201)
        expect(replay.body.toString()).toBe('{"id":"ch_class"}')
        expect(cached.calls).toBe(store.calls)
        expect(store.calls).toBeGreaterThanOrEqual(3)
      }
    } finally {
      await client.flush()
      await client.close()
    }
  })
})
