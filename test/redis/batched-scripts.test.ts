import { Redis } from 'ioredis'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { createRedisCache, type InFlightSnapshot, type RedisCache, type SettledSnapshot } from '../../src/redis/cache.js'
import type { CacheEntry } from '../../src/redis/entry.js'
import type { RedisLike } from '../../src/redis/options.js'
import { MAX_KEYS_PER_READ } from '../../src/redis/raw-reads.js'
import { MAX_KEYS_PER_SCRIPT } from '../../src/redis/scripts.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { REDIS_ADDRESS, REDIS_URL, redisForTests, testRedis } from './support/test-redis.js'

// Issue 21: the cache's reads that arrive together leave as one command (a script answering each
// key's value and PTTL), and so do its writes (a script setting each key with its life, NX where
// asked, in the order asked), against the machine's real Redis. The client is the real one,
// wrapped only to note which commands the cache sends. One file, so its tests run one after
// another: a SCRIPT FLUSH of one test would otherwise add an EVAL to what another counts.
const availability = await redisForTests()
const SECRET = 'a test secret of enough bytes'

type Client = Awaited<ReturnType<typeof testRedis>>

const settled = (key: string, fingerprint = `fp-${key}`): SettledSnapshot => ({
  scope: 'u1',
  key,
  status: 'completed',
  fingerprint,
  claimId: '00000000-0000-4000-8000-000000000001',
  expiresInMs: 60_000,
  response: { status: 201, headers: [['x-key', key]], body: Buffer.from(`{"key":"${key}"}`) },
})
const inFlight = (key: string): InFlightSnapshot => ({ scope: 'u1', key, fingerprint: `fp-${key}`, claimId: '00000000-0000-4000-8000-000000000002', leaseAgeMs: 0 })

/** The real client, noting each command the cache sends (and for scripts, how many keys). */
function noting(redis: Redis, sent: string[], shape: { scripts: boolean; isCluster?: boolean }): RedisLike {
  const plain: RedisLike = {
    get: (key) => (sent.push('get'), redis.get(key)),
    pttl: (key) => (sent.push('pttl'), redis.pttl(key)),
    set: (key: string, value: string, mode: 'PX', milliseconds: number, condition?: 'NX') => {
      sent.push(condition === undefined ? 'set' : 'set nx')
      return condition === undefined ? redis.set(key, value, mode, milliseconds) : redis.set(key, value, mode, milliseconds, condition)
    },
  }
  if (!shape.scripts) return plain
  return {
    ...plain,
    evalsha: (sha, numKeys, ...rest) => (sent.push(`evalsha ${numKeys}`), redis.evalsha(sha, numKeys, ...rest)),
    eval: (script, numKeys, ...rest) => (sent.push(`eval ${numKeys}`), redis.eval(script, numKeys, ...rest)),
    ...(shape.isCluster === true ? { isCluster: true } : {}),
  }
}

/** An entry without its times, which move between two reads. */
const timeless = (entries: Array<CacheEntry | undefined>) => entries.map((entry) => entry && { ...entry, remainingMs: 0, ...(entry.kind === 'in-flight' ? { leaseAgeMs: 0 } : {}) })

describe.skipIf(!availability.run)('the Redis cache reads that arrive together', () => {
  let client: Client
  let cache: RedisCache
  const sent: string[] = []
  const keys = Array.from({ length: 20 }, (_, i) => `k${i}`)
  // Reads bounded far above the default 100 ms: on a loaded machine (CI's two cores) a batch of
  // keys past that bound is a miss, and the answers compared would differ for that alone.
  const cacheOver = (shape: { scripts: boolean; isCluster?: boolean }) =>
    createRedisCache({ redis: noting(client.redis, sent, shape), secret: SECRET, prefix: client.prefix, staleAfterMs: 600_000, inFlightMaxMs: 60_000, timeoutMs: 10_000 })
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

describe.skipIf(!availability.run)('the Redis cache writes that arrive together', () => {
  let client: Client
  let cache: RedisCache
  const sent: string[] = []
  const keys = Array.from({ length: 20 }, (_, i) => `w${i}`)
  // Bounded far above the default 100 ms: on a loaded machine (CI's two cores) a batch past that
  // bound is a lost write, and the entries compared would differ for that alone.
  const cacheOver = (shape: { scripts: boolean; isCluster?: boolean }, redis = client.redis) =>
    createRedisCache({ redis: noting(redis, sent, shape), secret: SECRET, prefix: client.prefix, staleAfterMs: 600_000, inFlightMaxMs: 60_000, timeoutMs: 10_000 })
  const redisKey = (key: string) => `${client.prefix}oncely:u1:${key}`
  const written = async (from: RedisCache, list = keys) => (await Promise.all(list.map((key) => from.read('u1', key)))).map((entry) => entry && `${entry.kind} ${entry.fingerprint}`)

  beforeAll(async () => {
    client = await testRedis()
    cache = cacheOver({ scripts: true })
    // Known to Redis before each test counts what is sent.
    await cache.rememberSettled(settled('warm'), 0, true)
  })
  beforeEach(async () => {
    await client.flush()
    sent.length = 0
  })
  afterAll(async () => {
    await client?.flush()
    await client?.close()
  })

  it('leave as one script after the first: each entry as it is when written alone', async () => {
    await Promise.all(keys.map((key) => cache.rememberSettled(settled(key), 0, true)))
    expect(sent).toEqual(['evalsha 1', 'evalsha 19'])
    expect(await written(cache)).toEqual(keys.map((key) => `settled fp-${key}`))
    // Each with the life it was given, by Redis's clock.
    const lives = await Promise.all(keys.map((key) => client.redis.pttl(redisKey(key))))
    for (const life of lives) expect(life).toBeGreaterThan(50_000)
    expect(Math.max(...lives)).toBeLessThanOrEqual(60_000)
  })

  it(`at most ${MAX_KEYS_PER_SCRIPT} keys to a script`, async () => {
    const many = Array.from({ length: 150 }, (_, i) => `m${i}`)
    await Promise.all(many.map((key) => cache.rememberSettled(settled(key), 0, true)))
    expect(sent).toEqual(['evalsha 1', `evalsha ${MAX_KEYS_PER_SCRIPT}`, `evalsha ${MAX_KEYS_PER_SCRIPT}`, `evalsha ${149 - 2 * MAX_KEYS_PER_SCRIPT}`])
    expect(await written(cache, many)).toEqual(many.map((key) => `settled fp-${key}`))
  })

  it("keep their order and their NX in a batch and from batch to batch: an eviction's mark and an outcome are never written over by a reader", async () => {
    const [a, b, c, d] = ['o1', 'o2', 'o3', 'o4']
    // One in flight; the rest queue behind it and leave together, in the order asked.
    await Promise.all([
      cache.rememberInFlight(inFlight('first'), 0),
      // The owner's in-flight entry, then its outcome over it.
      cache.rememberInFlight(inFlight(a), 0),
      cache.rememberSettled(settled(a), 0, true),
      // An outcome, then a reader's late in-flight write (NX): the outcome stays.
      cache.rememberSettled(settled(b), 0, true),
      cache.rememberInFlight(inFlight(b), 0),
      // An eviction, then a reader's late settled write (NX): the mark stays, the key a miss.
      cache.evict('u1', c),
      cache.rememberSettled(settled(c), 0, false),
      // A reader's write (NX), then the owner's outcome with another fingerprint over it.
      cache.rememberSettled(settled(d), 0, false),
      cache.rememberSettled(settled(d, 'fp-owner'), 0, true),
    ])
    expect(sent).toEqual(['evalsha 1', 'evalsha 8'])
    expect(await written(cache, [a, b, c, d])).toEqual([`settled fp-${a}`, `settled fp-${b}`, undefined, 'settled fp-owner'])
    expect(await client.redis.get(redisKey(c))).toBe('evicted')
  })

  it('a Redis that forgot the script (restarted, SCRIPT FLUSH) is sent it whole, and writes', async () => {
    await client.redis.script('FLUSH')
    await cache.rememberSettled(settled('f1'), 0, true)
    expect(sent).toEqual(['evalsha 1', 'eval 1'])
    await cache.rememberSettled(settled('f2'), 0, true)
    expect(sent.slice(2)).toEqual(['evalsha 1'])
    expect(await written(cache, ['f1', 'f2'])).toEqual(['settled fp-f1', 'settled fp-f2'])
  })

  it('a Cluster sends each write as a SET of its own: its keys live in different slots', async () => {
    const cluster = cacheOver({ scripts: true, isCluster: true })
    await Promise.all([...keys.map((key) => cluster.rememberSettled(settled(key), 0, true)), cluster.rememberInFlight(inFlight('c1'), 0)])
    expect(sent.filter((command) => command.startsWith('set'))).toEqual([...keys.map(() => 'set'), 'set nx'])
    expect(sent.filter((command) => !command.startsWith('set'))).toEqual([])
    expect(await written(cache, [...keys, 'c1'])).toEqual([...keys.map((key) => `settled fp-${key}`), 'in-flight fp-c1'])
  })

  it('a client without scripts sends a SET per write', async () => {
    const plain = cacheOver({ scripts: false })
    await Promise.all(keys.map((key) => plain.rememberSettled(settled(key), 0, true)))
    expect(sent).toEqual(keys.map(() => 'set'))
    expect(await written(cache)).toEqual(keys.map((key) => `settled fp-${key}`))
  })
})

// A user of the machine's Redis of this test's own whose ACL refuses both script commands.
describe.skipIf(!availability.run)('the Redis cache writes on a Redis whose ACL refuses scripts', () => {
  const user = `oncely-test-nowritescript-${process.pid}`
  let client: Client
  let restricted: Redis

  beforeAll(async () => {
    client = await testRedis()
    await client.redis.call('ACL', 'SETUSER', user, 'on', '>a-password-of-the-test', '~*', '+@all', '-eval', '-evalsha')
    restricted = new Redis({ ...REDIS_ADDRESS, username: user, password: 'a-password-of-the-test', enableOfflineQueue: false, maxRetriesPerRequest: 0 })
    if (restricted.status !== 'ready') await new Promise((resolve) => restricted.once('ready', resolve))
  })
  afterAll(async () => {
    restricted?.disconnect()
    await client?.redis.call('ACL', 'DELUSER', user)
    await client?.flush()
    await client?.close()
  })

  it('write with SET once refused, in the order asked: the refusal loses no write and is not an error', async () => {
    const errors: unknown[] = []
    const sent: string[] = []
    const cache = createRedisCache({ redis: noting(restricted, sent, { scripts: true }), secret: SECRET, prefix: client.prefix, onError: (error) => errors.push(error) })
    await cache.rememberSettled(settled('n1'), 0, true)
    expect(sent).toEqual(['evalsha 1', 'set'])
    await Promise.all([cache.rememberSettled(settled('n2'), 0, true), cache.rememberInFlight(inFlight('n3'), 0), cache.evict('u1', 'n1'), cache.rememberSettled(settled('n1'), 0, false)])
    expect(sent.slice(2)).toEqual(['set', 'set nx', 'set', 'set nx'])
    const reader = createRedisCache({ redis: client.redis, secret: SECRET, prefix: client.prefix })
    expect((await Promise.all(['n1', 'n2', 'n3'].map((key) => reader.read('u1', key)))).map((entry) => entry?.kind)).toEqual([undefined, 'settled', 'in-flight'])
    expect(errors).toEqual([])
  })
})

describe.skipIf(!availability.run)('the Redis cache writes when Redis hangs', () => {
  let proxy: TcpProxy
  let client: Client
  let cache: RedisCache
  const errors: unknown[] = []

  beforeAll(async () => {
    proxy = await startTcpProxy(REDIS_URL)
    client = await testRedis(proxy.port)
    cache = createRedisCache({ redis: client.redis, secret: SECRET, prefix: client.prefix, timeoutMs: 200, onError: (error) => errors.push(error) })
    await cache.rememberSettled(settled('warm'), 0, true)
  })
  afterAll(async () => {
    proxy?.restore()
    await client?.flush()
    await client?.close()
    await proxy?.close()
  })

  it('a write queued behind a script that does not answer gives up within timeoutMs of being asked, not twice that', async () => {
    proxy.stall()
    const timed = async (write: () => Promise<void>) => {
      const started = performance.now()
      await write()
      return performance.now() - started
    }
    // The first leaves at once and hangs; the second waits for it, then has no time left.
    const [first, second] = await Promise.all([timed(() => cache.rememberSettled(settled('h1'), 0, true)), timed(() => cache.evict('u1', 'h2'))])
    proxy.restore()
    expect(first).toBeGreaterThanOrEqual(190)
    expect(second, `${second} ms`).toBeLessThan(300)
    expect(errors.map(String)).toEqual(['Error: Redis did not answer within 200 ms', 'Error: Redis did not answer within 200 ms'])
  })
})
