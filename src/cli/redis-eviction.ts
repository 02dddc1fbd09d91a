import { randomBytes } from 'node:crypto'
import type { EvictableCache } from '../ops/release-key.js'
import { createRedisCache } from '../redis/index.js'
import { UsageError } from './command.js'

export const REDIS_FLAGS = { 'redis-url': { type: 'string' } } as const

export const REDIS_HELP = `  --redis-url URL      the Redis cache in front of the database (default: $REDIS_URL): a
                       release evicts the key from it (entries under oncely:SCHEMA:, as
                       the reference service writes them)`

/** How long the command waits for Redis to connect or answer before it reports the eviction failed. */
const REDIS_TIMEOUT_MS = 2000

/** The cache a release evicts from, with what the command must report when it could not. */
export interface RedisEviction extends EvictableCache {
  /** Whether the last `evict` reached Redis. */
  readonly evicted: boolean
  /** The Redis key of a key's entry, for the operator to delete by hand when the eviction failed. */
  entryName(scope: string, key: string): string
  close(): Promise<void>
}

/** `--redis-url`, else `REDIS_URL` (empty counts as unset); a URL that is not redis:// or rediss:// is bad usage. */
export function redisUrlFrom(values: { 'redis-url'?: string | undefined }): string | undefined {
  const raw = values['redis-url'] || process.env.REDIS_URL?.trim() || undefined
  if (raw === undefined) return undefined
  let protocol: string
  try {
    protocol = new URL(raw).protocol
  } catch {
    protocol = ''
  }
  if (protocol !== 'redis:' && protocol !== 'rediss:') throw new UsageError(`--redis-url (or REDIS_URL) must be a redis:// or rediss:// URL; got ${JSON.stringify(raw)}`)
  return raw
}

/**
 * The Redis cache of the reference service (namespace: the schema), only to evict: its entries
 * are never read or written here, so the signing secret is a throwaway. Unlike the cache on a
 * request's path, a Redis that is away is an error here, so the release can say so.
 */
export async function openRedisEviction(url: string, namespace: string): Promise<RedisEviction> {
  let Redis: typeof import('ioredis').Redis
  try {
    ;({ Redis } = await import('ioredis'))
  } catch {
    throw new Error('--redis-url needs the ioredis package: npm install ioredis')
  }
  const redis = new Redis(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: REDIS_TIMEOUT_MS })
  redis.on('error', () => {})
  let failure: unknown
  const cache = createRedisCache({ redis, secret: randomBytes(32), namespace, timeoutMs: REDIS_TIMEOUT_MS, onError: (error) => (failure = error) })
  let evicted = false
  return {
    get evicted() {
      return evicted
    },
    entryName: (scope, key) => `${cache.options.keyPrefix}${encodeURIComponent(scope)}:${key}`,
    async evict(scope, key) {
      evicted = false
      failure = undefined
      if (redis.status === 'wait') await redis.connect()
      // The cache's commands never throw (a miss on the request path); here a failure is reported.
      await cache.evict(scope, key)
      if (failure !== undefined) throw failure instanceof Error ? failure : new Error('Redis refused the eviction', { cause: failure })
      evicted = true
    },
    async close() {
      if (redis.status === 'ready') await redis.quit().catch(() => redis.disconnect())
      else redis.disconnect()
    },
  }
}
