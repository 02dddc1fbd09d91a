import { Redis } from 'ioredis'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { createRedisCache, type RedisCache, type SettledSnapshot } from '../../src/redis/cache.js'
import type { CacheEntry } from '../../src/redis/entry.js'
import type { RedisLike } from '../../src/redis/options.js'
import { MAX_KEYS_PER_READ } from '../../src/redis/raw-reads.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { REDIS_ADDRESS, REDIS_URL, redisForTests, testRedis } from './support/test-redis.js'

// Issue 21: the cache's reads that arrive together leave as one command (a script answering each
// key's value and PTTL), against the machine's real Redis. The client is the real one, wrapped
// only to note which commands the cache sends.
const availability = await redisForTests()
const SECRET = 'a test secret of enough bytes'

const settled = (key: string): SettledSnapshot => ({
  scope: 'u1',
  key,
  status: 'completed',
  fingerprint: `fp-${key}`,
  claimId: '00000000-0000-4000-8000-000000000001',
  expiresInMs: 60_000,
  response: { status: 201, headers: [['x-key', key]], body: Buffer.from(`{"key":"${key}"}`) },
})

type Client = Awaited<ReturnType<typeof testRedis>>

/** An entry without its times, which move between two reads. */
const timeless = (entries: Array<CacheEntry | undefined>) => entries.map((entry) => entry && { ...entry, remainingMs: 0, ...(entry.kind === 'in-flight' ? { leaseAgeMs: 0 } : {}) })

/** The real client, noting each command the cache sends (and for scripts, how many keys). */
function noting(client: Client, sent: string[], shape: { scripts: boolean; isCluster?: boolean }): RedisLike {
  const { redis } = client
  const plain: RedisLike = {
    get: (key) => (sent.push('get'), redis.get(key)),
    pttl: (key) => (sent.push('pttl'), redis.pttl(key)),
    set: redis.set.bind(redis),
  }
  if (!shape.scripts) return plain
  return {
    ...plain,
    evalsha: (sha, numKeys, ...keys) => (sent.push(`evalsha ${numKeys}`), redis.evalsha(sha, numKeys, ...keys)),
    eval: (script, numKeys, ...keys) => (sent.push(`eval ${numKeys}`), redis.eval(script, numKeys, ...keys)),
    ...(shape.isCluster === true ? { isCluster: true } : {}),
  }
}

describe.skipIf(!availability.run)('the Redis cache reads that arrive together', () => {
  let client: Client
  let cache: RedisCache
  const sent: string[] = []
  const keys = Array.from({ length: 20 }, (_, i) => `k${i}`)
  // Reads bounded far above the default 100 ms: on a loaded machine (CI's two cores) a batch of
  // keys past that bound is a miss, and the answers compared would differ for that alone.
  const cacheOver = (shape: { scripts: boolean; isCluster?: boolean }) =>
    createRedisCache({ redis: noting(client, sent, shape), secret: SECRET, prefix: client.prefix, staleAfterMs: 600_000, inFlightMaxMs: 60_000, timeoutMs: 10_000 })
  const redisKey = (key: string) => `${client.prefix}oncely:u1:${key}`

  beforeAll(async () => {
    client = await testRedis()
    cache = cacheOver({ scripts: true })
    // Every kind of entry a read can meet: settled ones, a claim in flight, an eviction's mark,
    // a value not the library's, and no value at all (k19).
    for (const key of keys.slice(0, 16)) await cache.rememberSettled(settled(key), 0, false)
    await cache.rememberInFlight({ scope: 'u1', key: 'k16', fingerprint: 'fp-k16', claimId: '00000000-0000-4000-8000-000000000002', leaseAgeMs: 0 }, 0)
    await cache.rememberSettled(settled('k17'), 0, false)
    await cache.evict('u1', 'k17')
    await client.redis.set(redisKey('k18'), 'not an entry', 'PX', 60_000)
    // Known to Redis before each test counts what is sent.
    await cache.read('u1', 'k0')
  })
  beforeEach(() => {
    sent.length = 0
  })
  afterAll(async () => client?.close())

  const readAll = (from: RedisCache) => Promise.all(keys.map((key) => from.read('u1', key)))

  it('leave as one script after the first: each answered as it is when read alone', async () => {
    const together = await readAll(cache)
    expect(sent).toEqual(['evalsha 1', 'evalsha 19'])
    const alone = []
    for (const key of keys) alone.push(await cache.read('u1', key))
    expect(timeless(together)).toEqual(timeless(alone))
    expect(together.slice(0, 16).map((entry) => entry?.kind === 'settled' && Buffer.from(entry.response.body).toString())).toEqual(keys.slice(0, 16).map((key) => `{"key":"${key}"}`))
    expect(together.slice(16).map((entry) => entry?.kind)).toEqual(['in-flight', undefined, undefined, undefined])
  })

  it(`at most ${MAX_KEYS_PER_READ} keys to a script`, async () => {
    const many = Array.from({ length: 150 }, (_, i) => keys[i % keys.length]!)
    const entries = await Promise.all(many.map((key) => cache.read('u1', key)))
    expect(sent).toEqual(['evalsha 1', `evalsha ${MAX_KEYS_PER_READ}`, `evalsha ${MAX_KEYS_PER_READ}`, `evalsha ${149 - 2 * MAX_KEYS_PER_READ}`])
    expect(entries.map((entry) => entry?.fingerprint)).toEqual(many.map((key) => (Number(key.slice(1)) <= 16 ? `fp-${key}` : undefined)))
  })

  it('a Redis that forgot the script (restarted, SCRIPT FLUSH) is sent it whole, and answers', async () => {
    await client.redis.script('FLUSH')
    expect(await cache.read('u1', 'k3')).toMatchObject({ kind: 'settled', fingerprint: 'fp-k3' })
    expect(sent).toEqual(['evalsha 1', 'eval 1'])
    expect(await cache.read('u1', 'k4')).toMatchObject({ kind: 'settled', fingerprint: 'fp-k4' })
    expect(sent.slice(2)).toEqual(['evalsha 1'])
  })

  it('a Cluster sends each key its own script: its keys live in different slots', async () => {
    const together = await readAll(cacheOver({ scripts: true, isCluster: true }))
    expect(sent).toEqual(keys.map(() => 'evalsha 1'))
    expect(timeless(together)).toEqual(timeless(await readAll(cache)))
  })

  it('a client without scripts sends a GET and a PTTL per read', async () => {
    const together = await readAll(cacheOver({ scripts: false }))
    expect(sent.filter((command) => command === 'get')).toHaveLength(keys.length)
    expect(sent.filter((command) => command === 'pttl')).toHaveLength(keys.length)
    sent.length = 0
    expect(timeless(together)).toEqual(timeless(await readAll(cache)))
  })
})

// Users of the machine's Redis of this test's own: one refused both script commands, one refused
// EVAL only, whose EVALSHA of a script Redis forgot (SCRIPT FLUSH) is answered NOSCRIPT.
describe.skipIf(!availability.run).each([
  { refuses: ['-eval', '-evalsha'], forgotten: false, first: ['evalsha', 'get', 'pttl'] },
  { refuses: ['-eval'], forgotten: true, first: ['evalsha', 'eval', 'get', 'pttl'] },
])('the Redis cache reads on a Redis whose ACL refuses $refuses', ({ refuses, forgotten, first }) => {
  const user = `oncely-test-noscript-${process.pid}-${refuses.length}`
  let client: Client
  let restricted: Redis
  const sent: string[] = []

  beforeAll(async () => {
    client = await testRedis()
    await client.redis.call('ACL', 'SETUSER', user, 'on', '>a-password-of-the-test', '~*', '+@all', ...refuses)
    restricted = new Redis({ ...REDIS_ADDRESS, username: user, password: 'a-password-of-the-test', enableOfflineQueue: false, maxRetriesPerRequest: 0 })
    if (restricted.status !== 'ready') await new Promise((resolve) => restricted.once('ready', resolve))
  })
  afterAll(async () => {
    restricted?.disconnect()
    await client?.redis.call('ACL', 'DELUSER', user)
    await client?.close()
  })

  it('read with GET and PTTL once refused: the entries still answer, the refusal is not a miss', async () => {
    const errors: unknown[] = []
    const writer = createRedisCache({ redis: client.redis, secret: SECRET, prefix: client.prefix })
    for (const key of ['n1', 'n2', 'n3']) await writer.rememberSettled(settled(key), 0, false)
    if (forgotten) await client.redis.script('FLUSH')
    const redis = restricted
    const noting: RedisLike = {
      get: (key) => (sent.push('get'), redis.get(key)),
      pttl: (key) => (sent.push('pttl'), redis.pttl(key)),
      set: redis.set.bind(redis),
      evalsha: (sha, numKeys, ...keys) => (sent.push('evalsha'), redis.evalsha(sha, numKeys, ...keys)),
      eval: (script, numKeys, ...keys) => (sent.push('eval'), redis.eval(script, numKeys, ...keys)),
    }
    const cache = createRedisCache({ redis: noting, secret: SECRET, prefix: client.prefix, onError: (error) => errors.push(error) })
    expect(await cache.read('u1', 'n1')).toMatchObject({ kind: 'settled', fingerprint: 'fp-n1' })
    expect(sent).toEqual(first)
    expect((await Promise.all(['n2', 'n3'].map((key) => cache.read('u1', key)))).map((entry) => entry?.fingerprint)).toEqual(['fp-n2', 'fp-n3'])
    expect(sent.slice(first.length).sort()).toEqual(['get', 'get', 'pttl', 'pttl'])
    expect(errors).toEqual([])
  })
})

describe.skipIf(!availability.run)('the Redis cache reads when Redis hangs', () => {
  let proxy: TcpProxy
  let client: Client
  let cache: RedisCache
  const errors: unknown[] = []

  beforeAll(async () => {
    proxy = await startTcpProxy(REDIS_URL)
    client = await testRedis(proxy.port)
    cache = createRedisCache({ redis: client.redis, secret: SECRET, prefix: client.prefix, timeoutMs: 200, onError: (error) => errors.push(error) })
    await cache.read('u1', 'warm')
  })
  afterAll(async () => {
    proxy?.restore()
    await client?.close()
    await proxy?.close()
  })

  it('a read queued behind a script that does not answer is a miss within timeoutMs of being asked, not twice that', async () => {
    proxy.stall()
    const timed = async (key: string) => {
      const started = performance.now()
      const entry = await cache.read('u1', key)
      return { entry, ms: performance.now() - started }
    }
    // The first leaves at once and hangs; the second waits for it, then has no time left.
    const [first, second] = await Promise.all([timed('h1'), timed('h2')])
    proxy.restore()
    expect(first.entry).toBeUndefined()
    expect(second.entry).toBeUndefined()
    expect(first.ms).toBeGreaterThanOrEqual(190)
    expect(second.ms, `${second.ms} ms`).toBeLessThan(300)
    expect(errors.map(String)).toEqual(['Error: Redis did not answer within 200 ms', 'Error: Redis did not answer within 200 ms'])
  })
})
