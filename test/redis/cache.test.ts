import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { createRedisCache, type RedisCache, type SettledSnapshot } from '../../src/redis/cache.js'
import { encodeEntry } from '../../src/redis/entry.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { REDIS_URL, redisForTests, testRedis } from './support/test-redis.js'

// The Redis half of oncely/redis against the machine's real Redis, under a prefix of this file's
// own: what it stores, how long, and that nothing it did not write (or wrote for another key,
// or that has expired) is ever read back.
const availability = await redisForTests()
const SECRET = 'a test secret of enough bytes'

const settled = (key: string, expiresInMs = 60_000): SettledSnapshot => ({
  scope: 'u1',
  key,
  status: 'completed',
  fingerprint: 'fp-1',
  claimId: '00000000-0000-4000-8000-000000000001',
  expiresInMs,
  response: { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_1"}') },
})
const inFlight = (key: string, leaseAgeMs = 0) => ({ scope: 'u1', key, fingerprint: 'fp-1', claimId: '00000000-0000-4000-8000-000000000002', leaseAgeMs })

describe.skipIf(!availability.run)('the Redis cache', () => {
  let client: Awaited<ReturnType<typeof testRedis>>
  let cache: RedisCache
  const redisKey = (key: string, scope = 'u1') => `${client.prefix}oncely:${scope}:${key}`

  beforeAll(async () => {
    client = await testRedis()
    cache = createRedisCache({ redis: client.redis, secret: SECRET, prefix: client.prefix, staleAfterMs: 10_000 })
  })
  afterAll(async () => client?.close())

  it('reads back a settled key: status, headers and body bytes as stored', async () => {
    await cache.rememberSettled(settled('s1'), 0, false)
    const entry = await cache.read('u1', 's1')
    expect(entry).toMatchObject({ kind: 'settled', status: 'completed', fingerprint: 'fp-1', claimId: settled('s1').claimId })
    if (entry?.kind !== 'settled') throw new Error('not settled')
    expect(entry.response.status).toBe(201)
    expect(entry.response.headers).toEqual([['content-type', 'application/json']])
    expect(Buffer.from(entry.response.body).toString()).toBe('{"id":"ch_1"}')
  })

  it('a settled entry expires before the key does, minus the time since the read', async () => {
    await cache.rememberSettled(settled('s2', 5000), 1000, false)
    const ttl = await client.redis.pttl(redisKey('s2'))
    expect(ttl).toBeGreaterThan(0)
    expect(ttl).toBeLessThanOrEqual(4000)
  })

  it('a key with no time left is not cached', async () => {
    await cache.rememberSettled(settled('s3', 100), 0, false)
    expect(await client.redis.exists(redisKey('s3'))).toBe(0)
  })

  it('an in-flight entry lives no longer than inFlightMaxMs, nor past the time the claim could go stale', async () => {
    await cache.rememberInFlight(inFlight('i1'), 0)
    expect(await client.redis.pttl(redisKey('i1'))).toBeLessThanOrEqual(1000)
    await cache.rememberInFlight(inFlight('i2', 9500), 0)
    expect(await client.redis.pttl(redisKey('i2'))).toBeLessThanOrEqual(500)
    await cache.rememberInFlight(inFlight('i3', 9000), 900)
    expect(await client.redis.exists(redisKey('i3'))).toBe(0)
    expect(await cache.read('u1', 'i1')).toMatchObject({ kind: 'in-flight', fingerprint: 'fp-1' })
  })

  it('a reader never overwrites an entry; the owner that stored the outcome does', async () => {
    await cache.rememberInFlight(inFlight('o1'), 0)
    await cache.rememberSettled(settled('o1'), 0, false)
    expect((await cache.read('u1', 'o1'))?.kind).toBe('in-flight')
    await cache.rememberSettled(settled('o1'), 0, true)
    expect((await cache.read('u1', 'o1'))?.kind).toBe('settled')
    // An in-flight entry never replaces a settled one, whoever writes it.
    await cache.rememberInFlight(inFlight('o1'), 0)
    expect((await cache.read('u1', 'o1'))?.kind).toBe('settled')
  })

  it('an eviction is a miss, and keeps a reader that read the old state out', async () => {
    await cache.rememberSettled(settled('e1'), 0, false)
    await cache.evict('u1', 'e1')
    expect(await cache.read('u1', 'e1')).toBeUndefined()
    await cache.rememberSettled(settled('e1'), 0, false)
    await cache.rememberInFlight(inFlight('e1'), 0)
    expect(await cache.read('u1', 'e1')).toBeUndefined()
  })

  describe('entries the library did not write for this request are ignored', () => {
    it('a forged body (the response changed, the signature kept)', async () => {
      await cache.rememberSettled(settled('f1'), 0, false)
      const stored = JSON.parse((await client.redis.get(redisKey('f1'))) ?? '{}') as Record<string, unknown>
      stored.rb = Buffer.from('{"id":"ch_forged"}').toString('base64')
      await client.redis.set(redisKey('f1'), JSON.stringify(stored))
      expect(await cache.read('u1', 'f1')).toBeUndefined()
    })

    it('an entry copied under another key or another scope', async () => {
      await cache.rememberSettled(settled('c1'), 0, false)
      const value = (await client.redis.get(redisKey('c1'))) ?? ''
      await client.redis.set(redisKey('c2'), value)
      await client.redis.set(redisKey('c1', 'u2'), value)
      expect(await cache.read('u1', 'c2')).toBeUndefined()
      expect(await cache.read('u2', 'c1')).toBeUndefined()
    })

    it('an entry signed with another secret', async () => {
      const other = createRedisCache({ redis: client.redis, secret: 'another secret, as long as it', prefix: client.prefix })
      await other.rememberSettled(settled('k1'), 0, false)
      expect(await other.read('u1', 'k1')).toBeDefined()
      expect(await cache.read('u1', 'k1')).toBeUndefined()
    })

    it('an entry Redis holds longer than the life it was signed with, or forever', async () => {
      const value = encodeEntry(Buffer.from(SECRET), 'u1', 'x1', { ...settled('x1'), kind: 'settled', lifeMs: 1000 })
      await client.redis.set(redisKey('x1'), value, 'PX', 60_000)
      expect(await cache.read('u1', 'x1')).toBeUndefined()
      await client.redis.set(redisKey('x1'), value)
      expect(await cache.read('u1', 'x1')).toBeUndefined()
      await client.redis.set(redisKey('x1'), value, 'PX', 1000)
      expect(await cache.read('u1', 'x1')).toMatchObject({ kind: 'settled' })
    })

    it('garbage', async () => {
      for (const value of ['', 'not json', '{}', '{"m":"x"}', '[]', 'null']) {
        await client.redis.set(redisKey('g1'), value)
        expect(await cache.read('u1', 'g1')).toBeUndefined()
      }
    })
  })
})

// Issue 22: an entry's age and expiry are Redis's (PX when written, PTTL when read), never the
// writer's clock compared with the reader's. The reader's clock is set an hour ahead (Date only)
// as a machine whose clock is off would have it; Redis's is the machine's own.
describe.skipIf(!availability.run)('the Redis cache with clocks that disagree', () => {
  let client: Awaited<ReturnType<typeof testRedis>>
  let cache: RedisCache
  beforeAll(async () => {
    client = await testRedis()
    cache = createRedisCache({ redis: client.redis, secret: SECRET, prefix: client.prefix, staleAfterMs: 10_000 })
  })
  afterAll(async () => client?.close())
  afterEach(() => {
    vi.useRealTimers()
  })
  const readAnHourAhead = async (key: string) => {
    vi.useFakeTimers({ toFake: ['Date'] })
    vi.setSystemTime(Date.now() + 3_600_000)
    return cache.read('u1', key)
  }

  it('a settled entry is read by a reader whose clock runs ahead, with what Redis says it has left', async () => {
    await cache.rememberSettled(settled('k1', 60_000), 0, false)
    const entry = await readAnHourAhead('k1')
    expect(entry?.kind).toBe('settled')
    expect(entry!.remainingMs).toBeGreaterThan(0)
    expect(entry!.remainingMs).toBeLessThanOrEqual(60_000)
  })

  it('an in-flight entry too, its lease aged by the clock of Redis since it was written', async () => {
    await cache.rememberInFlight(inFlight('k2', 300), 0)
    const entry = await readAnHourAhead('k2')
    if (entry?.kind !== 'in-flight') throw new Error(`expected an in-flight entry, got ${entry?.kind}`)
    expect(entry.leaseAgeMs).toBeGreaterThanOrEqual(300)
    expect(entry.leaseAgeMs).toBeLessThanOrEqual(300 + 1000)
    expect(entry.leaseAgeMs + entry.remainingMs).toBeLessThanOrEqual(300 + 1000)
  })
})

describe.skipIf(!availability.run)('the Redis cache when Redis fails', () => {
  let proxy: TcpProxy
  let client: Awaited<ReturnType<typeof testRedis>>
  let cache: RedisCache
  const errors: unknown[] = []

  beforeAll(async () => {
    proxy = await startTcpProxy(REDIS_URL)
    client = await testRedis(proxy.port)
    cache = createRedisCache({ redis: client.redis, secret: SECRET, prefix: client.prefix, timeoutMs: 100, onError: (error) => errors.push(error) })
    await client.redis.ping()
  })
  afterAll(async () => {
    proxy?.restore()
    await client?.close()
    await proxy?.close()
  })

  it('stopped: every command is a miss at once, reported to onError, never thrown', async () => {
    await cache.rememberSettled(settled('d1'), 0, false)
    proxy.cut()
    const before = errors.length
    const started = performance.now()
    expect(await cache.read('u1', 'd1')).toBeUndefined()
    await cache.rememberSettled(settled('d2'), 0, true)
    await cache.evict('u1', 'd1')
    expect(performance.now() - started).toBeLessThan(1000)
    expect(errors.length).toBeGreaterThan(before)
    // The client may not have seen its connection die yet (still 'ready' on a stream that cannot
    // be written): wait for the connection it makes anew.
    const reconnected = new Promise((resolve) => client.redis.once('ready', resolve))
    proxy.restore()
    await reconnected
  })

  it('hanging: a command that does not answer is a miss after timeoutMs', async () => {
    // Back after the outage above: reconnected before the next one.
    if (client.redis.status !== 'ready') await new Promise((resolve) => client.redis.once('ready', resolve))
    proxy.stall()
    const before = errors.length
    expect(await cache.read('u1', 'h1')).toBeUndefined()
    expect(errors.length).toBe(before + 1)
    expect(String(errors.at(-1))).toContain('did not answer within 100 ms')
    proxy.restore()
  })
})
