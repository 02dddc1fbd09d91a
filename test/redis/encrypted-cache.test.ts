import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type EncryptionOptions, type Engine, type StoredResponse } from '../../src/index.js'
import { createRedisCache, withRedisCache } from '../../src/redis/index.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { countingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { redisForTests, testRedis } from './support/test-redis.js'

// Issue 23: encryption is applied outermost, so the Redis cache in front of PostgreSQL holds the
// sealed response too, and a replay from Redis alone still opens it.
const availability = await redisForTests()
const encryption: EncryptionOptions = { keys: { A: randomBytes(32) }, current: 'A' }
const print = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const SECRET = 'ch_secret_in_redis_4242'
const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json'], ['x-charge', SECRET]], body: Buffer.from(`{"id":"${SECRET}"}`) }

describe.skipIf(!availability.run)('the Redis cache under encryption', () => {
  let db: TestDatabase
  let client: Awaited<ReturnType<typeof testRedis>>
  let counter: ReturnType<typeof countingPool>
  let engine: Engine<Queryable>

  beforeAll(async () => {
    db = await createTestDatabase()
    client = await testRedis()
    const cache = createRedisCache({ redis: client.redis, secret: 'the encrypted-cache test', prefix: client.prefix, namespace: db.schema, staleAfterMs: 10_000 })
    counter = countingPool(db.pool)
    engine = createEngine<Queryable>({ store: withRedisCache(createPostgresStore({ pool: counter, schema: db.schema }), cache), staleAfterMs: 10_000, ttlMs: 60_000, encryption })
  })
  afterAll(async () => {
    await client?.flush()
    await client?.close()
    await db?.close()
  })

  it('the value in Redis holds neither the body nor the headers in clear; a replay from Redis opens it', async () => {
    const first = await engine.begin({ scope: 'u1', key: 'k1', fingerprint: print })
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.complete(response)
    const keys = await client.redis.keys(`${client.prefix}*`)
    expect(keys).toHaveLength(1)
    const stored = (await client.redis.get(keys[0] ?? '')) ?? ''
    expect(stored.length).toBeGreaterThan(0)
    for (const clear of [SECRET, Buffer.from(SECRET).toString('base64'), Buffer.from(response.body).toString('base64')]) expect(stored).not.toContain(clear)
    counter.reset()
    const replay = await engine.begin({ scope: 'u1', key: 'k1', fingerprint: print })
    expect(counter.statements).toEqual([])
    if (replay.kind !== 'replay') throw new Error(replay.kind)
    expect(replay.response.headers).toEqual(response.headers)
    expect(Buffer.from(replay.response.body).toString()).toBe(`{"id":"${SECRET}"}`)
  })
})
