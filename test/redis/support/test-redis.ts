import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { versionIndependentPass } from '../../helpers/test-passes.js'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

/** The machine's Redis, from `REDIS_URL` or 127.0.0.1:6379. */
export const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379'

/** The host and port of `REDIS_URL`. */
export const REDIS_ADDRESS = (() => {
  const url = new URL(REDIS_URL)
  return { host: url.hostname, port: Number(url.port || 6379) }
})()

/**
 * Whether the Redis tests run: they need a Redis; under `CI=true` they run in the `DATABASE_URL`
 * pass only (nothing in them depends on the PostgreSQL version), and a missing Redis is a
 * failure, not a skip. Outside CI they run on whichever PostgreSQL when Redis answers.
 */
export async function redisForTests(): Promise<{ run: true } | { run: false; reason: string }> {
  if (!versionIndependentPass) return { run: false, reason: "under CI=true, the Redis tests run in the DATABASE_URL pass only" }
  const probe = new Redis({ ...REDIS_ADDRESS, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try {
    await probe.connect()
    await probe.ping()
    return { run: true }
  } catch (error) {
    const reason = `no Redis at ${REDIS_ADDRESS.host}:${REDIS_ADDRESS.port} (${String(error)}): the Redis tests are skipped`
    if (process.env.CI === 'true') throw new Error(`${reason}; under CI=true they must run`)
    process.stderr.write(`${reason}\n`)
    return { run: false, reason }
  } finally {
    probe.disconnect()
  }
}

/**
 * A client for one test file, writing only under its own random prefix, so nothing another user
 * of the shared Redis holds is ever read, flushed or overwritten. `flush()` deletes the prefix.
 */
export async function testRedis(port = REDIS_ADDRESS.port): Promise<{ redis: Redis; prefix: string; flush(): Promise<void>; close(): Promise<void> }> {
  const prefix = `oncely-test:${randomBytes(6).toString('hex')}:`
  // As the docs advise: no offline queue, no retries, so a Redis that is away fails fast.
  const redis = new Redis({ host: REDIS_ADDRESS.host, port, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 })
  redis.on('error', () => {})
  if (redis.status !== 'ready') await new Promise((resolve) => redis.once('ready', resolve))
  const untrack = trackOpenHandle(`Redis client ${prefix}`)
  const flush = async () => {
    const admin = new Redis({ ...REDIS_ADDRESS, maxRetriesPerRequest: 1 })
    try {
      let cursor = '0'
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500)
        cursor = next
        if (keys.length > 0) await admin.del(...keys)
      } while (cursor !== '0')
    } finally {
      admin.disconnect()
    }
  }
  return {
    redis,
    prefix,
    flush,
    async close() {
      await flush()
      redis.disconnect()
      untrack()
    },
  }
}
