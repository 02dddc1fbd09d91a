import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type Engine } from '../../src/index.js'
import { createRedisCache, withRedisCache } from '../../src/redis/index.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { jsonResponse } from '../helpers/engine.js'
import { REDIS_ADDRESS, redisForTests } from './support/test-redis.js'

// `oncely keys release` as a real process, against the machine's Redis: a released key's cached
// replay must not outlive the release (docs/redis.md: an operator's release evicts).
const availability = await redisForTests()
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })

describe.skipIf(!availability.run)('oncely keys release with a Redis cache', () => {
  let db: TestDatabase
  let redis: Redis
  let engine: Engine<Queryable>
  let env: Record<string, string>
  // A scope of this file's own: the entries live under oncely:SCHEMA:, shared with other files.
  const scope = `release-${randomBytes(6).toString('hex')}`
  const entryName = (key: string) => `oncely:${encodeURIComponent(db.schema)}:${scope}:${key}`

  beforeAll(async () => {
    db = await createTestDatabase()
    redis = new Redis({ ...REDIS_ADDRESS, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 })
    redis.on('error', () => {})
    if (redis.status !== 'ready') await new Promise((resolve) => redis.once('ready', resolve))
    // The reference service's cache: namespace the schema, prefix oncely:.
    const cache = createRedisCache({ redis, secret: 'the keys release test secret', namespace: db.schema, staleAfterMs: 60_000 })
    engine = createEngine({ store: withRedisCache(createPostgresStore({ pool: db.pool, schema: db.schema }), cache), staleAfterMs: 60_000 })
    env = { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema, IDEMPOTENCY_STALE_AFTER_MS: '60000', REDIS_URL: '' }
  })
  afterAll(async () => {
    const keys = await redis.keys(`oncely:${encodeURIComponent(db.schema)}:${scope}:*`)
    if (keys.length > 0) await redis.del(...keys)
    redis.disconnect()
    await db.close()
  })

  /** A completed key whose replay the cache now answers. */
  async function cachedReplay(key: string): Promise<void> {
    await engine.run({ scope, key, fingerprint }, async () => jsonResponse(201, `{"id":"${key}"}`))
    expect(JSON.parse((await redis.get(entryName(key))) ?? '{}')).toMatchObject({ k: 's', rs: 201 })
    expect((await engine.begin({ scope, key, fingerprint })).kind).toBe('replay')
  }

  it('--redis-url, or REDIS_URL: the cached replay entry is gone after the release, and the next request runs as new', async () => {
    for (const [key, args, extraEnv] of [
      ['by-flag', ['--redis-url', `redis://${REDIS_ADDRESS.host}:${REDIS_ADDRESS.port}`], {}],
      ['by-env', [], { REDIS_URL: `redis://${REDIS_ADDRESS.host}:${REDIS_ADDRESS.port}` }],
    ] as const) {
      await cachedReplay(key)
      const result = await runCli(['keys', 'release', scope, key, '--force', ...args], { ...env, ...extraEnv })
      expect(result.code, result.stderr).toBe(0)
      expect(result.stdout).toContain('evicted from the Redis cache')
      // Only the eviction's mark is left, which no reader takes for an entry.
      expect(await redis.get(entryName(key))).toBe('evicted')
      const next = await engine.begin({ scope, key, fingerprint })
      expect(next.kind).toBe('execute')
      if (next.kind === 'execute') await next.execution.release()
    }
  })

  it('a Redis that does not answer: released in PostgreSQL, exit 1, naming the entry to delete by hand', async () => {
    await cachedReplay('redis-away')
    const result = await runCli(['keys', 'release', scope, 'redis-away', '--force', '--redis-url', 'redis://127.0.0.1:9', '--json'], env)
    expect(result.code).toBe(1)
    expect(JSON.parse(result.stdout)).toMatchObject({ released: true, cache: { evicted: false, entry: entryName('redis-away') } })
    expect(result.stderr).toMatch(/^error: released key could not be evicted from the cache /m)
    expect(result.stderr).toContain(`Delete the Redis key ${JSON.stringify(entryName('redis-away'))} by hand`)
  })

  it('a URL that is not redis:// is bad usage, exit 2, before anything is released', async () => {
    await cachedReplay('bad-url')
    const result = await runCli(['keys', 'release', scope, 'bad-url', '--force', '--redis-url', 'http://127.0.0.1:6379'], env)
    expect(result.code).toBe(2)
    expect(result.stderr).toContain('must be a redis:// or rediss:// URL')
    expect((await engine.begin({ scope, key: 'bad-url', fingerprint })).kind).toBe('replay')
  })
})
