import { readFile } from 'node:fs/promises'
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { providerCharges, startProvider, startService, type TestProcess } from '../helpers/processes.js'
import { charge, newUser, post } from '../service/support/api.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { REDIS_ADDRESS, REDIS_URL, redisForTests } from './support/test-redis.js'

// The reference service with REDIS_URL, as a black box: the answers are the same with Redis,
// when it stops mid-run, when it is flushed, and when it holds entries it did not write.
const availability = await redisForTests()
// Forcing the release of a key with a stored outcome needs the console's token (issue 22).
const CONSOLE_TOKEN = 'the service test console token'

describe.skipIf(!availability.run)('the reference service with REDIS_URL', () => {
  let db: TestDatabase
  let provider: TestProcess
  let proxy: TcpProxy
  let service: TestProcess
  let admin: Redis
  const users: string[] = []
  const user = () => {
    const id = newUser()
    users.push(id)
    return id
  }
  // The service's entries: prefix `oncely:`, its schema, then the user (docs/redis.md).
  const pattern = (id: string) => `oncely:${encodeURIComponent(db.schema)}:${id}:*`

  beforeAll(async () => {
    db = await createTestDatabase()
    provider = await startProvider()
    proxy = await startTcpProxy(REDIS_URL)
    admin = new Redis({ ...REDIS_ADDRESS, maxRetriesPerRequest: 1 })
    service = await startService({
      databaseUrl: db.url,
      schema: db.schema,
      providerUrl: provider.url,
      staleAfterMs: 10_000,
      env: { REDIS_URL: proxy.url, ONCELY_CACHE_SECRET: 'the service test secret', CONSOLE_TOKEN },
    })
  })
  afterAll(async () => {
    await service?.stop()
    // Only this file's users' entries: the shared Redis is never flushed.
    for (const id of users) {
      const keys = await admin.keys(pattern(id))
      if (keys.length > 0) await admin.del(...keys)
    }
    admin?.disconnect()
    await proxy?.close()
    await provider?.stop()
    await db?.close()
  })

  it('replays from the cache what PostgreSQL holds, and writes its entries where docs/redis.md says', async () => {
    const id = user()
    const first = await post(service.url, { user: id, key: 'c-1', body: charge('cus_cache', 1200) })
    const again = await post(service.url, { user: id, key: 'c-1', body: charge('cus_cache', 1200) })
    expect(first.status).toBe(201)
    expect(again.text).toBe(first.text)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect((await post(service.url, { user: id, key: 'c-1', body: charge('cus_cache', 999) })).status).toBe(422)
    expect(await admin.keys(pattern(id))).toHaveLength(1)
    expect(await providerCharges(provider.url, id)).toHaveLength(1)
  })

  it('a replay from the cache is two socket writes, its Redis read (one script) and the answer (issue 21)', async () => {
    const id = user()
    const body = charge('cus_pipelined', 1300)
    expect((await post(service.url, { user: id, key: 'pipelined', body })).status).toBe(201)
    expect((await post(service.url, { user: id, key: 'pipelined', body })).headers.get('idempotent-replayed')).toBe('true')
    // The process's write system calls (/proc/<pid>/io): to the client, Redis, PostgreSQL, logs.
    const writes = async () => Number(/^syscw: (\d+)$/m.exec(await readFile(`/proc/${service.child.pid}/io`, 'utf8'))?.[1])
    const replays = 100
    const before = await writes()
    for (let i = 0; i < replays; i++) expect((await post(service.url, { user: id, key: 'pipelined', body })).headers.get('idempotent-replayed')).toBe('true')
    const perReplay = ((await writes()) - before) / replays
    // A read written in two parts would make three; a replay from PostgreSQL, three as well
    // (the Redis read, the query, the answer). The half leaves room for the relay's polls.
    expect(perReplay, `${perReplay} writes per replay`).toBeLessThan(2.5)
    expect(perReplay).toBeGreaterThanOrEqual(2)
  })

  it('a key released from the console is evicted: the next request runs as new, never a cached replay', async () => {
    const id = user()
    const first = await post(service.url, { user: id, key: 'console-1' })
    expect((await post(service.url, { user: id, key: 'console-1' })).headers.get('idempotent-replayed')).toBe('true')
    const authorization = `Bearer ${CONSOLE_TOKEN}`
    const page = await (await fetch(`${service.url}/console`, { headers: { authorization } })).text()
    const csrf = /name="oncely-csrf" content="([^"]+)"/.exec(page)?.[1] ?? ''
    const released = await fetch(`${service.url}/console/api/release`, {
      method: 'POST',
      headers: { authorization, 'content-type': 'application/json', 'x-csrf-token': csrf, origin: new URL(service.url).origin },
      body: JSON.stringify({ user: id, key: 'console-1', force: true, confirm: 'console-1' }),
    })
    expect(released.status).toBe(200)
    expect(await released.json()).toMatchObject({ released: true })
    const after = await post(service.url, { user: id, key: 'console-1' })
    expect(after.status).toBe(201)
    expect(after.headers.get('idempotent-replayed')).toBeNull()
    expect(after.text).not.toBe(first.text)
    expect(await providerCharges(provider.url, id)).toHaveLength(2)
  })

  it('Redis stopped mid-run: the same answers, from PostgreSQL', async () => {
    const id = user()
    const first = await post(service.url, { user: id, key: 's-1' })
    proxy.cut()
    try {
      const replay = await post(service.url, { user: id, key: 's-1' })
      expect(replay.text).toBe(first.text)
      const fresh = await post(service.url, { user: id, key: 's-2' })
      expect(fresh.status).toBe(201)
      expect((await post(service.url, { user: id, key: 's-2' })).text).toBe(fresh.text)
    } finally {
      proxy.restore()
    }
    expect((await post(service.url, { user: id, key: 's-1' })).text).toBe(first.text)
    expect(await providerCharges(provider.url, id)).toHaveLength(2)
  })

  it('flushed mid-run, or holding entries it did not write: the answers PostgreSQL gives', async () => {
    const id = user()
    const first = await post(service.url, { user: id, key: 'w-1' })
    // The completion writes its entry once its transaction has committed; a replay writes one
    // that is missing. The service's Redis client may still be reconnecting after the previous
    // test's outage (a cache that is away only costs speed), so wait until it writes again.
    let entry: string | undefined
    for (const started = Date.now(); entry === undefined && Date.now() - started < 20_000; ) {
      entry = (await admin.keys(pattern(id)))[0]
      if (entry !== undefined) break
      await new Promise((resolve) => setTimeout(resolve, 200))
      expect((await post(service.url, { user: id, key: 'w-1' })).text).toBe(first.text)
    }
    if (!entry) throw new Error('no entry cached')
    await admin.del(entry)
    expect((await post(service.url, { user: id, key: 'w-1' })).text).toBe(first.text)
    // A 409 and a forged response planted for the completed key: neither is answered.
    const stored = JSON.parse((await admin.get(entry)) ?? '{}') as Record<string, unknown>
    await admin.set(entry, JSON.stringify({ ...stored, k: 'i', la: 0, wa: Date.now() }))
    expect((await post(service.url, { user: id, key: 'w-1' })).text).toBe(first.text)
    await admin.set(entry, JSON.stringify({ ...stored, rb: Buffer.from('{"id":"ch_forged"}').toString('base64') }))
    expect((await post(service.url, { user: id, key: 'w-1' })).text).toBe(first.text)
    // A replay planted for a key the service has never seen: the key is new, and charges once.
    await admin.set(entry.replace(/w-1$/, 'w-2'), (await admin.get(entry)) ?? '')
    const fresh = await post(service.url, { user: id, key: 'w-2' })
    expect(fresh.status).toBe(201)
    expect(fresh.text).not.toBe(first.text)
    expect(await providerCharges(provider.url, id)).toHaveLength(2)
  })
})
