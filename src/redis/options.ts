import { DEFAULT_STALE_AFTER_MS } from '../engine/options.js'
import { describeKind, invalid, invalidHidden, positiveInteger } from '../option-validation.js'

/** The commands the cache sends: an `ioredis` client has them. */
export interface RedisLike {
  get(key: string): Promise<string | null>
  /** Milliseconds the key has left; negative when it has no expiry or does not exist. */
  pttl(key: string): Promise<number>
  set(key: string, value: string, mode: 'PX', milliseconds: number): Promise<unknown>
  set(key: string, value: string, mode: 'PX', milliseconds: number, condition: 'NX'): Promise<unknown>
  /**
   * Scripts, when the client has them (an `ioredis` client does): the reads that arrive together
   * then leave as one command. Without them each read is a GET and a PTTL.
   */
  evalsha?(sha: string, numKeys: number, ...keys: string[]): Promise<unknown>
  eval?(script: string, numKeys: number, ...keys: string[]): Promise<unknown>
  /** True on an `ioredis` Cluster: its keys live in different slots, so each read is its own script. */
  readonly isCluster?: boolean
}

export interface RedisCacheOptions {
  /**
   * The Redis client, such as `new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, enableAutoPipelining: true })`
   * from `ioredis`: without an offline queue, a command to a Redis that is away fails at once and
   * the request falls through to PostgreSQL. (Default: none; required)
   */
  redis: RedisLike
  /**
   * The HMAC secret every entry is signed with, at least 16 bytes; every process sharing the
   * cache needs the same one. An entry not signed with it is ignored. (Default: none; required)
   */
  secret: string | Uint8Array
  /** Namespace of the entries, so two stores (two schemas) never share one: use the schema. (Default: `oncely`) */
  namespace?: string
  /** Prefix of every Redis key the cache writes. (Default: `oncely:`) */
  prefix?: string
  /** The engine's stale threshold: a cached claim is never answered with 409 past it. (Default: 90000) */
  staleAfterMs?: number
  /** A Redis command slower than this counts as a miss; the request goes to PostgreSQL. (Default: 100) */
  timeoutMs?: number
  /**
   * Longest life of a cached in-flight claim (a 409 answered without PostgreSQL), below the time
   * until the claim could go stale. It bounds how long a 409 can outlive its claim when Redis
   * failed to take the entry back at completion. (Default: 1000)
   */
  inFlightMaxMs?: number
  /** How long a release or eviction keeps late writers of the key's old state out. (Default: 10000) */
  evictedMs?: number
  /** Called with every Redis error; each is a miss, never a failure of the request. (Default: ignore) */
  onError?: (error: unknown) => void
}

export interface ResolvedRedisCacheOptions {
  redis: RedisLike
  secret: Uint8Array
  keyPrefix: string
  staleAfterMs: number
  timeoutMs: number
  inFlightMaxMs: number
  evictedMs: number
  onError: (error: unknown) => void
}

export function resolveRedisCacheOptions(options: RedisCacheOptions): Readonly<ResolvedRedisCacheOptions> {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const { redis } = options
  if (typeof redis !== 'object' || redis === null || typeof redis.get !== 'function' || typeof redis.set !== 'function' || typeof redis.pttl !== 'function') {
    // Described, not shown: a client's options, or a URL passed instead of one, hold a password.
    throw invalidHidden('redis', 'must be a Redis client with get, set and pttl, such as an ioredis instance', describeKind(redis))
  }
  const secret = typeof options.secret === 'string' ? Buffer.from(options.secret, 'utf8') : options.secret
  if (!(secret instanceof Uint8Array) || secret.byteLength < 16) {
    const given = secret instanceof Uint8Array ? `${secret.byteLength} bytes (not shown)` : describeKind(options.secret)
    throw invalidHidden('secret', 'must be a string or bytes of at least 16 bytes', given)
  }
  const namespace = options.namespace ?? 'oncely'
  const prefix = options.prefix ?? 'oncely:'
  if (typeof namespace !== 'string' || namespace === '') throw invalid('namespace', 'must be a non-empty string', namespace)
  if (typeof prefix !== 'string') throw invalid('prefix', 'must be a string', prefix)
  const onError = options.onError ?? (() => {})
  if (typeof onError !== 'function') throw invalid('onError', 'must be a function', onError)
  return Object.freeze({
    redis,
    secret,
    keyPrefix: `${prefix}${encodeURIComponent(namespace)}:`,
    staleAfterMs: positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS),
    timeoutMs: positiveInteger('timeoutMs', options.timeoutMs ?? 100),
    inFlightMaxMs: positiveInteger('inFlightMaxMs', options.inFlightMaxMs ?? 1000),
    evictedMs: positiveInteger('evictedMs', options.evictedMs ?? 10_000),
    onError,
  })
}
