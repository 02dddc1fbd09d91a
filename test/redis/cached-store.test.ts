import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type Engine, type StoredResponse } from '../../src/index.js'
import { createRedisCache, withRedisCache, type RedisCache } from '../../src/redis/index.js'
import { MAX_HELD_CLAIMS } from '../../src/redis/cached-store.js'
import { encodeEntry } from '../../src/redis/entry.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { countingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { keyTable } from '../helpers/engine.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { REDIS_URL, redisForTests, testRedis } from './support/test-redis.js'

// oncely/redis in front of the real PostgreSQL store, on the real Redis behind a proxy of this
// file's own. Every answer is compared with what PostgreSQL alone answers for the same request
// (Invariant 10): the cache may only save round trips, never change an answer.
const availability = await redisForTests()
const SECRET = 'the secret of the cached-store test'
const print = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const other = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 2000 } })
const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_cached"}') }

describe.skipIf(!availability.run)('withRedisCache', () => {
  let db: TestDatabase
  let proxy: TcpProxy
  let client: Awaited<ReturnType<typeof testRedis>>
  let cache: RedisCache
  let counter: ReturnType<typeof countingPool>
  let engine: Engine<Queryable>
  let plain: Engine<Queryable>
  let n = 0
  const newKey = () => `key-${n++}`
  const redisKey = (key: string) => `${client.prefix}${encodeURIComponent(db.schema)}:u1:${key}`
  const begin = (e: Engine<Queryable>, key: string, fingerprint = print) => e.begin({ scope: 'u1', key, fingerprint })
  /** The answer PostgreSQL alone gives, without changing anything (a key it would claim is released again). */
  const truth = async (key: string, fingerprint = print) => {
    const decision = await begin(plain, key, fingerprint)
    if (decision.kind === 'execute') await decision.execution.release()
    return decision.kind
  }
  const completed = async (key: string) => {
    const decision = await begin(engine, key)
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    await decision.execution.complete(response)
  }

  beforeAll(async () => {
    db = await createTestDatabase()
    proxy = await startTcpProxy(REDIS_URL)
    client = await testRedis(proxy.port)
    cache = createRedisCache({ redis: client.redis, secret: SECRET, prefix: client.prefix, namespace: db.schema, staleAfterMs: 10_000, inFlightMaxMs: 5000 })
    counter = countingPool(db.pool)
    engine = createEngine<Queryable>({ store: withRedisCache(createPostgresStore({ pool: counter, schema: db.schema }), cache), staleAfterMs: 10_000, ttlMs: 60_000 })
    plain = createEngine<Queryable>({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 10_000, ttlMs: 60_000 })
  })
  afterAll(async () => {
    proxy?.restore()
    await client?.close()
    await proxy?.close()
    await db?.close()
  })

  it('replays a completed key from Redis, with no statement to PostgreSQL', async () => {
    const key = newKey()
    await completed(key)
    counter.reset()
    const decision = await begin(engine, key)
    expect(decision.kind).toBe('replay')
    if (decision.kind === 'replay') expect(Buffer.from(decision.response.body).toString()).toBe('{"id":"ch_cached"}')
    expect(counter.statements).toEqual([])
  })

  it('inspect reads PostgreSQL, never the cache: a row gone behind a warm cache is gone (issue 23)', async () => {
    const key = newKey()
    await completed(key)
    counter.reset()
    expect((await begin(engine, key)).kind).toBe('replay')
    expect(counter.statements).toEqual([])
    expect((await engine.inspect({ scope: 'u1', key }))?.state).toBe('completed')
    await db.pool.query(`DELETE FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`, [key])
    counter.reset()
    expect(await engine.inspect({ scope: 'u1', key })).toBeNull()
    expect(counter.roundTrips()).toBe(1)
  })

  it('answers 409 for a claim in flight from Redis, and 422 before 409 for another payload', async () => {
    const key = newKey()
    const owner = await begin(engine, key)
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    counter.reset()
    expect((await begin(engine, key)).kind).toBe('conflict')
    expect((await begin(engine, key, other)).kind).toBe('mismatch')
    expect(counter.statements).toEqual([])
    await owner.execution.complete(response)
    // The completion replaced the in-flight entry: a replay, never a 409 for a completed key.
    expect((await begin(engine, key)).kind).toBe('replay')
    expect(await truth(key)).toBe('replay')
  })

  it('a released claim is evicted: the next request owns the key, as PostgreSQL says', async () => {
    const key = newKey()
    const first = await begin(engine, key)
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.release()
    expect(await truth(key)).toBe('execute')
    const next = await begin(engine, key)
    expect(next.kind).toBe('execute')
    if (next.kind === 'execute') await next.execution.release()
  })

  it('a suspended claim is evicted: the next request takes it over, not a 409', async () => {
    const key = newKey()
    const first = await begin(engine, key)
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.step('charge', () => ({ id: 'pch_1' }))
    await first.execution.suspend()
    const next = await begin(engine, key)
    expect(next.kind).toBe('execute')
    if (next.kind === 'execute') {
      expect(next.execution.how).toBe('take-over')
      await next.execution.complete(response)
    }
  })

  it('remembers at most MAX_HELD_CLAIMS claims: past it the oldest is forgotten, and its completion evicts instead of caching', async () => {
    // Claims whose release or suspension failed are never let go; before issue 21 they were only
    // pruned past their key's expiry, by a walk of the whole map at every new claim once 10 000
    // had gathered. Now the oldest goes first, one for each new claim past the bound.
    const store = withRedisCache(createPostgresStore({ pool: db.pool, schema: db.schema }), cache)
    const claim = (key: string) => store.claim({ scope: 'u1', key, fingerprint: print, ttlMs: 60_000, claimId: randomUUID(), fenceToken: randomUUID() })
    const held: Array<{ key: string; fenceToken: string }> = []
    for (let start = 0; start <= MAX_HELD_CLAIMS; start += 500) {
      const keys = Array.from({ length: Math.min(500, MAX_HELD_CLAIMS + 1 - start) }, newKey)
      const attempts = await Promise.all(keys.map(claim))
      for (const attempt of attempts) {
        if (attempt.kind !== 'inserted') throw new Error(attempt.kind)
        held.push({ key: attempt.claim.key, fenceToken: attempt.claim.fenceToken })
      }
    }
    expect(held).toHaveLength(MAX_HELD_CLAIMS + 1)
    const [first, second] = held as [(typeof held)[0], (typeof held)[0]]
    const outcome = { status: 'completed' as const, response }
    // The oldest, pushed out by the last claim: completed in PostgreSQL, its key evicted from
    // Redis, so its replay is read from PostgreSQL.
    expect(await store.complete({ scope: 'u1', ...first }, outcome)).toBe(true)
    counter.reset()
    expect((await begin(engine, first.key)).kind).toBe('replay')
    expect(counter.statements).not.toEqual([])
    // The next oldest, still held: its outcome is cached, and replayed from Redis alone.
    expect(await store.complete({ scope: 'u1', ...second }, outcome)).toBe(true)
    counter.reset()
    expect((await begin(engine, second.key)).kind).toBe('replay')
    expect(counter.statements).toEqual([])
  })

  it('a completion in one flight (statements) replaces the in-flight entry: a replay from Redis, never a 409', async () => {
    const key = newKey()
    const owner = await begin(engine, key)
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    expect((await begin(engine, key)).kind).toBe('conflict')
    await owner.execution.complete(response, { statements: [{ text: 'SELECT 1' }] })
    counter.reset()
    expect((await begin(engine, key)).kind).toBe('replay')
    expect(counter.statements).toEqual([])
    expect(await truth(key)).toBe('replay')
  })

  it('a flight that lost its fence or failed: the cached answer stays PostgreSQL\'s (a failed one evicted)', async () => {
    const lost = newKey()
    const owner = await begin(engine, lost)
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    expect((await begin(engine, lost)).kind).toBe('conflict')
    // Another worker's token now holds the row: this owner's flight rolls back.
    await db.pool.query(`UPDATE ${keyTable(db)} SET fence_token = gen_random_uuid() WHERE scope = 'u1' AND key = $1`, [lost])
    await expect(owner.execution.complete(response, { statements: [] })).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    // Still running under the other token: the in-flight answer is PostgreSQL's too.
    expect([(await begin(engine, lost)).kind, await truth(lost)]).toEqual(['conflict', 'conflict'])
    const failing = newKey()
    const second = await begin(engine, failing)
    if (second.kind !== 'execute') throw new Error(second.kind)
    expect((await begin(engine, failing)).kind).toBe('conflict')
    await expect(second.execution.complete(response, { statements: [{ text: 'SELECT 1 / 0' }] })).rejects.toMatchObject({ code: 'ONCELY_OUTCOME_NOT_RECORDED' })
    expect(await cache.read('u1', failing)).toBeUndefined()
    expect(await truth(failing)).toBe('execute')
  })

  it('a completion inside the caller\'s transaction evicts the key: nothing cached before its commit', async () => {
    const key = newKey()
    const owner = await begin(engine, key)
    if (owner.kind !== 'execute') throw new Error(owner.kind)
    const tx = await db.pool.connect()
    try {
      await tx.query('BEGIN')
      await owner.execution.complete(response, { tx })
      // Not committed yet, and it may still roll back: the cache holds nothing for the key.
      expect(await cache.read('u1', key)).toBeUndefined()
      await tx.query('COMMIT')
    } finally {
      tx.release()
    }
    expect((await begin(engine, key)).kind).toBe('replay')
  })

  it('Redis stopped mid-run: every answer comes from PostgreSQL, and is the same', async () => {
    const done = newKey()
    await completed(done)
    proxy.cut()
    try {
      const running = newKey()
      const owner = await begin(engine, running)
      expect(owner.kind).toBe('execute')
      expect((await begin(engine, done)).kind).toBe('replay')
      expect((await begin(engine, running)).kind).toBe('conflict')
      expect((await begin(engine, done, other)).kind).toBe('mismatch')
      if (owner.kind === 'execute') await owner.execution.complete(response)
      expect((await begin(engine, running)).kind).toBe('replay')
    } finally {
      proxy.restore()
    }
    if (client.redis.status !== 'ready') await new Promise((resolve) => client.redis.once('ready', resolve))
    expect((await begin(engine, done)).kind).toBe('replay')
  })

  it('flushed mid-run: a miss, answered by PostgreSQL', async () => {
    const key = newKey()
    await completed(key)
    await client.flush()
    counter.reset()
    expect((await begin(engine, key)).kind).toBe('replay')
    expect(counter.statements).toHaveLength(1)
  })

  describe('wrong entries in Redis change no answer', () => {
    const forge = (key: string, entry: Parameters<typeof encodeEntry>[3], secret = 'not the secret, but as long') => encodeEntry(Buffer.from(secret), 'u1', key, entry)
    const settledEntry = (fingerprint: string, body: string, lifeMs = 60_000) => ({
      kind: 'settled' as const,
      status: 'completed' as const,
      fingerprint,
      claimId: 'c',
      lifeMs,
      response: { status: 201, headers: [['content-type', 'application/json']] as Array<[string, string]>, body: Buffer.from(body) },
    })

    it('another fingerprint: no 422 for the payload PostgreSQL holds', async () => {
      const key = newKey()
      await completed(key)
      await client.redis.set(redisKey(key), forge(key, settledEntry(other, '{"id":"ch_other"}')), 'PX', 60_000)
      const decision = await begin(engine, key)
      expect(decision.kind).toBe(await truth(key))
      if (decision.kind === 'replay') expect(Buffer.from(decision.response.body).toString()).toBe('{"id":"ch_cached"}')
    })

    it('a forged body with our signature format: never replayed', async () => {
      const key = newKey()
      await completed(key)
      const stored = JSON.parse((await client.redis.get(redisKey(key))) ?? '{}') as Record<string, unknown>
      stored.rb = Buffer.from('{"id":"ch_forged"}').toString('base64')
      await client.redis.set(redisKey(key), JSON.stringify(stored))
      const decision = await begin(engine, key)
      expect(decision.kind).toBe('replay')
      if (decision.kind === 'replay') expect(Buffer.from(decision.response.body).toString()).toBe('{"id":"ch_cached"}')
    })

    it('a replay for a key PostgreSQL has never seen (or has expired): the key is claimed', async () => {
      const key = newKey()
      await client.redis.set(redisKey(key), forge(key, settledEntry(print, '{"id":"ch_ghost"}')), 'PX', 60_000)
      // Signed for a life of 1 ms, held for a minute: past the life it was written with.
      const expired = newKey()
      await client.redis.set(redisKey(expired), encodeEntry(Buffer.from(SECRET), 'u1', expired, settledEntry(print, '{"id":"ch_old"}', 1)), 'PX', 60_000)
      for (const k of [key, expired]) {
        const decision = await begin(engine, k)
        expect(decision.kind).toBe('execute')
        if (decision.kind === 'execute') await decision.execution.release()
      }
    })

    it('a 409 for a completed key: the stored response', async () => {
      const key = newKey()
      await completed(key)
      await client.redis.set(redisKey(key), forge(key, { kind: 'in-flight', fingerprint: print, claimId: 'c', lifeMs: 60_000, leaseAgeMs: 0 }), 'PX', 60_000)
      expect((await begin(engine, key)).kind).toBe('replay')
    })
  })
})
