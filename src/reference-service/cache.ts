import { randomBytes } from 'node:crypto'
import { createRedisCache, withRedisCache } from '../redis/index.js'
import type { EvictableCache } from '../ops/index.js'
import type { PostgresStore } from '../store/postgres/index.js'
import type { ServiceConfig } from './config.js'

/**
 * With `REDIS_URL`, the store with the Redis cache in front (docs/redis.md); without it, the
 * store as it is. A Redis that is away, slow or wrong changes only the speed: every command is a
 * miss at once (no offline queue, no retries of a command), and the client reconnects by itself.
 */
export async function storeWithCache(
  config: Readonly<ServiceConfig>,
  store: PostgresStore,
  log: (line: string) => void,
): Promise<{ store: PostgresStore; cache?: EvictableCache; close(): Promise<void> }> {
  if (config.redisUrl === undefined) return { store, close: async () => {} }
  const { Redis } = await import('ioredis')
  // Auto-pipelining sends the commands of one event-loop turn in one write: a replay's GET and
  // PTTL, and those of concurrent requests, instead of a socket write per command (issue 21).
  const redis = new Redis(config.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 0, enableAutoPipelining: true, retryStrategy: (attempt) => Math.min(attempt * 100, 2000) })
  let lastLogged = 0
  const onError = (error: unknown) => {
    // One line per ten seconds at most: an outage must not flood the log or the hot path.
    if (Date.now() - lastLogged < 10_000) return
    lastLogged = Date.now()
    log(`Redis cache unavailable, answering from PostgreSQL: ${error instanceof Error ? error.message : String(error)}`)
  }
  redis.on('error', onError)
  if (config.cacheSecret === undefined) log('ONCELY_CACHE_SECRET is not set: the cache entries are signed with a secret of this process only')
  const cache = createRedisCache({
    redis,
    secret: config.cacheSecret ?? randomBytes(32),
    namespace: config.schema,
    staleAfterMs: config.staleAfterMs,
    onError,
  })
  return { store: withRedisCache(store, cache), cache, close: async () => void redis.disconnect() }
}
