import { describe, expect, it } from 'vitest'
import { isOncelyError } from '../src/index.js'
import { createConsole } from '../src/ops/index.js'
import { resolveAdminDatabase } from '../src/ops/admin-database.js'
import { consume, createRabbitMqPublisher } from '../src/outbox/index.js'
import { resolveRelayOptions } from '../src/outbox/relay-options.js'
import { createRedisCache } from '../src/redis/index.js'
import { createPostgresStore, migrate } from '../src/store/postgres/index.js'

// Issue 12, the house: the option checks have one home (src/option-validation.ts) and one message
// shape in every part, `option NAME RULE; got VALUE`; a value that may hold a secret (a pool's
// configuration, a connection string, a token, a URL's password) is described, never shown.

const fakePool = { query: () => Promise.resolve({ rows: [], rowCount: 0 }), connect: () => Promise.reject(new Error('not used')) }
const publisher = { name: 'test', publish: () => Promise.resolve(), close: () => Promise.resolve() }
const redis = { get: () => Promise.resolve(null), set: () => Promise.resolve('OK'), pttl: () => Promise.resolve(-2) }
const connectionString = 'postgres://app:s3cret@db/app'

async function message(act: () => unknown): Promise<string> {
  let error: unknown
  try {
    await act()
  } catch (e) {
    error = e
  }
  if (isOncelyError(error, 'ONCELY_INVALID_OPTION')) return error.message
  throw new Error(`expected ONCELY_INVALID_OPTION, got ${String(error)}`)
}

describe('every part refuses a bad option as `option NAME RULE; got VALUE`', () => {
  it.each<[string, () => unknown, string]>([
    ['createPostgresStore without options', () => createPostgresStore(null as never), 'option options must be an object { pool, schema? }; got null'],
    ['createPostgresStore with a connection string for a pool', () => createPostgresStore({ pool: connectionString as never }), 'option pool must have query() and connect(), like pg.Pool; got a string (not shown)'],
    ['createPostgresStore with a pool config for a pool', () => createPostgresStore({ pool: { connectionString } as never }), 'option pool must have query() and connect(), like pg.Pool; got an object (not shown)'],
    ['createPostgresStore with a string lockTimeoutMs', () => createPostgresStore({ pool: fakePool as never, lockTimeoutMs: '5' as never }), 'option lockTimeoutMs must be a positive integer; got "5"'],
    [
      'createPostgresStore with lockTimeoutMs not below statementTimeoutMs',
      () => createPostgresStore({ pool: fakePool as never, statementTimeoutMs: 1000, lockTimeoutMs: 1000 }),
      'option lockTimeoutMs must be below statementTimeoutMs (1000); got 1000',
    ],
    ['migrate without options', () => migrate(undefined as never), 'option options must be an object { pool, schema? }; got undefined'],
    ['migrate with a connection string for a pool', () => migrate({ pool: connectionString as never }), 'option pool must have query() and connect(), like pg.Pool; got a string (not shown)'],
    ['migrate with a zero lockTimeoutMs', () => migrate({ pool: fakePool as never, lockTimeoutMs: 0 }), 'option lockTimeoutMs must be a positive integer; got 0'],
    ['migrate with a string timeoutMs', () => migrate({ pool: fakePool as never, timeoutMs: '5s' as never }), 'option timeoutMs must be a positive integer; got "5s"'],
    ['an ops function without a pool', () => resolveAdminDatabase({ pool: { connectionString } as never }), 'option pool must have query() and connect(), like pg.Pool; got an object (not shown)'],
    ['an ops function without options', () => resolveAdminDatabase(null as never), 'option options must be an object { pool, schema? }; got null'],
    ['consume without an entry', () => consume(fakePool as never, null as never, () => undefined), 'option entry must be an object { consumer, eventId }; got null'],
    ['consume with an empty consumer', () => consume(fakePool as never, { consumer: '', eventId: 'e1' }, () => undefined), 'option consumer must be a non-empty string; got ""'],
    ['consume without an eventId', () => consume(fakePool as never, { consumer: 'billing', eventId: 7 as never }, () => undefined), 'option eventId must be a non-empty string; got 7'],
    ['the relay with a connection string for a pool', () => resolveRelayOptions({ pool: connectionString as never, publisher }), 'option pool must have query() and connect(), like pg.Pool; got a string (not shown)'],
    ['the Redis cache with a URL for a client', () => createRedisCache({ redis: 'redis://:s3cret@cache' as never, secret: 'x'.repeat(16) }), 'option redis must be a Redis client with get, set and pttl, such as an ioredis instance; got a string (not shown)'],
    ['the Redis cache with a short secret', () => createRedisCache({ redis, secret: 's3cret' }), 'option secret must be a string or bytes of at least 16 bytes; got 6 bytes (not shown)'],
    ['the Redis cache without a secret', () => createRedisCache({ redis, secret: undefined as never }), 'option secret must be a string or bytes of at least 16 bytes; got undefined'],
    ['the console with a short token', () => createConsole({ database: { pool: fakePool as never }, token: 's3cret' }), 'option token must be at least 16 characters; got 6 characters (not shown)'],
    [
      'the RabbitMQ publisher with a URL of another scheme',
      () => createRabbitMqPublisher({ url: 'nats://user:s3cret@broker:4222' }),
      'option url must be an amqp:// or amqps:// URL; got "nats://***@broker:4222"',
    ],
  ])('%s', async (_name, act, expected) => {
    const shown = await message(act)
    expect(shown).toBe(expected)
    expect(shown).not.toContain('s3cret')
  })
})
