import { DEFAULT_STALE_AFTER_MS, DEFAULT_TTL_MS, parseEncryptionKeys, type EncryptionOptions } from '../index.js'

/** The ways the service can guard `POST /v1/charges`; only the first is oncely, `none` guards nothing. */
export const STRATEGIES = ['atomic-phases', 'select-for-update', 'claim-in-transaction', 'none'] as const
export type StrategyName = (typeof STRATEGIES)[number]

/** Everything the reference service reads from its environment and flags, resolved once. */
export interface ServiceConfig {
  /** Interface the API listens on. (Default: 127.0.0.1) */
  host: string
  /** Port of the API; 0 picks a free one. (Default: 3000) */
  port: number
  /** PostgreSQL to use; undefined starts the embedded one under `dataDir`. (Default: embedded) */
  databaseUrl: string | undefined
  /** Data folder of the embedded PostgreSQL. (Default: ./.oncely/pg) */
  dataDir: string
  /** Schema of oncely's tables. (Default: oncely) */
  schema: string
  /** Where the fake provider listens; undefined starts it as a child on `providerPort`. (Default: a child) */
  providerUrl: string | undefined
  /** Port of the child provider; 0 picks a free one. (Default: 3001) */
  providerPort: number
  /** The child provider's delay per charge. (Default: 0) */
  providerLatencyMs: number
  /** An in_progress claim older than this may be taken over. (Default: 90000) */
  staleAfterMs: number
  /** How long a key is remembered. (Default: 86400000) */
  ttlMs: number
  /** Which design guards the charges route. (Default: atomic-phases) */
  strategy: StrategyName
  /** Honour `X-Chaos-Crash`. (Default: false) */
  chaos: boolean
  /** Apply the migrations at start. (Default: true) */
  migrate: boolean
  /** A claim not renewed for this long is handed to the in-process reconciler; 0 turns it off. (Default: 2 × staleAfterMs) */
  reconcileAfterMs: number
  /** Serves `/console` on the API, where it is required on every request, and on the console's listener. (Default: none) */
  consoleToken: string | undefined
  /**
   * Port of the console's own listener, always bound to 127.0.0.1 (without `consoleToken` the only
   * place the console is served); 0 picks a free one; undefined (`CONSOLE_PORT=off`) starts none.
   * (Default: 3002 when `port` is 3000, else 0)
   */
  consolePort: number | undefined
  /** A Redis used only as a cache in front of PostgreSQL. (Default: none) */
  redisUrl: string | undefined
  /** The HMAC secret of the cache's entries, shared by every process using the cache. (Default: a random one per process) */
  cacheSecret: string | undefined
  /** Encryption at rest of stored responses and step results, from `id:base64,…` keys. (Default: none, stored in clear) */
  encryption: EncryptionOptions | undefined
  /** Where the in-process relay publishes the outbox: `nats://…` or `amqp://…`; none: to the log. (Default: none) */
  eventsUrl: string | undefined
  /** Run the outbox relay in-process; turn off when `oncely relay` runs beside it. (Default: true) */
  relay: boolean
  /** NOTIFY the relay in each completion transaction (it serialises commits); off, the relay's poll bounds the latency. (Default: true) */
  outboxNotify: boolean
  /**
   * Leave V8's allocation-site pretenuring on. Off (`--no-allocation-site-pretenuring`, set at
   * start), a fresh charge's objects stay in the young generation and die there; on, V8 soon
   * allocates some of them in the old generation, where they keep the rest alive until a full
   * collection (issue 21; docs/reference-service.md, "The collector"). (Default: false)
   */
  v8Pretenuring: boolean
}

/** Keys are described, never shown: an id, and how many bytes its key has. */
function encryptionFrom(keys: string | undefined, current: string | undefined): EncryptionOptions | undefined {
  if (keys === undefined) {
    if (current !== undefined) throw new ConfigError(`${ENV.encryptionCurrent} is set but ${ENV.encryptionKeys} is not`)
    return undefined
  }
  let parsed: EncryptionOptions
  try {
    parsed = parseEncryptionKeys(keys, current)
  } catch {
    throw new ConfigError(`${ENV.encryptionKeys} must be id:base64 pairs separated by commas (not shown)`)
  }
  for (const [id, key] of Object.entries(parsed.keys)) {
    const bytes = typeof key === 'string' ? Buffer.from(key, 'base64').length : key.length
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(id)) throw new ConfigError(`${ENV.encryptionKeys} has the key id ${JSON.stringify(id)}; an id is 1 to 64 of A-Z a-z 0-9 _ . -`)
    if (bytes !== 32) throw new ConfigError(`${ENV.encryptionKeys}: the key ${JSON.stringify(id)} must be 32 bytes of base64 (openssl rand -base64 32); got ${bytes} bytes (not shown)`)
  }
  if (!(parsed.current in parsed.keys)) throw new ConfigError(`${ENV.encryptionCurrent} must be one of the ids in ${ENV.encryptionKeys}; got ${JSON.stringify(parsed.current)}`)
  return parsed
}

/** A bad setting: the service refuses to start and names it. */
export class ConfigError extends Error {
  override name = 'ConfigError'
}

type Settings = Readonly<Record<string, string | undefined>>

/** The environment variable behind each setting; flags of `oncely serve` use the same names in kebab case. */
export const ENV = {
  host: 'HOST',
  port: 'PORT',
  databaseUrl: 'DATABASE_URL',
  dataDir: 'ONCELY_DATA_DIR',
  schema: 'ONCELY_SCHEMA',
  providerUrl: 'PROVIDER_URL',
  providerPort: 'PROVIDER_PORT',
  providerLatencyMs: 'PROVIDER_LATENCY_MS',
  staleAfterMs: 'IDEMPOTENCY_STALE_AFTER_MS',
  ttlMs: 'IDEMPOTENCY_TTL_MS',
  strategy: 'IDEMPOTENCY_STRATEGY',
  chaos: 'CHAOS',
  reconcileAfterMs: 'RECONCILE_AFTER_MS',
  consoleToken: 'CONSOLE_TOKEN',
  consolePort: 'CONSOLE_PORT',
  redisUrl: 'REDIS_URL',
  cacheSecret: 'ONCELY_CACHE_SECRET',
  encryptionKeys: 'ONCELY_ENCRYPTION_KEYS',
  encryptionCurrent: 'ONCELY_ENCRYPTION_CURRENT',
  eventsUrl: 'EVENTS_URL',
  relay: 'ONCELY_RELAY',
  outboxNotify: 'OUTBOX_NOTIFY',
  v8Pretenuring: 'ONCELY_V8_PRETENURING',
} as const

/**
 * Reads the settings from `env` (an empty string counts as unset everywhere: CI sets
 * `DATABASE_URL=` for the embedded run), validates and freezes them.
 */
export function resolveServiceConfig(env: Settings, overrides: Partial<ServiceConfig> = {}): Readonly<ServiceConfig> {
  const read = (name: string): string | undefined => {
    const value = env[name]?.trim()
    return value === undefined || value === '' ? undefined : value
  }
  const strategy = read(ENV.strategy) ?? 'atomic-phases'
  if (!(STRATEGIES as readonly string[]).includes(strategy)) {
    throw new ConfigError(`${ENV.strategy} must be one of ${STRATEGIES.join(', ')}; got ${JSON.stringify(strategy)}`)
  }
  const staleAfterMs = integer(ENV.staleAfterMs, read(ENV.staleAfterMs), DEFAULT_STALE_AFTER_MS, { min: 1 })
  const port = integer(ENV.port, read(ENV.port), 3000, { min: 0, max: 65535 })
  const config: ServiceConfig = {
    host: read(ENV.host) ?? '127.0.0.1',
    port,
    databaseUrl: read(ENV.databaseUrl),
    dataDir: read(ENV.dataDir) ?? '.oncely/pg',
    schema: read(ENV.schema) ?? 'oncely',
    providerUrl: read(ENV.providerUrl),
    providerPort: integer(ENV.providerPort, read(ENV.providerPort), 3001, { min: 0, max: 65535 }),
    providerLatencyMs: integer(ENV.providerLatencyMs, read(ENV.providerLatencyMs), 0, { min: 0 }),
    staleAfterMs,
    ttlMs: integer(ENV.ttlMs, read(ENV.ttlMs), DEFAULT_TTL_MS, { min: 1 }),
    strategy: strategy as StrategyName,
    chaos: flag(ENV.chaos, read(ENV.chaos)),
    migrate: true,
    reconcileAfterMs: integer(ENV.reconcileAfterMs, read(ENV.reconcileAfterMs), 2 * staleAfterMs, { min: 0 }),
    consoleToken: read(ENV.consoleToken),
    consolePort: consolePortFrom(read(ENV.consolePort), port),
    redisUrl: read(ENV.redisUrl),
    cacheSecret: read(ENV.cacheSecret),
    encryption: encryptionFrom(read(ENV.encryptionKeys), read(ENV.encryptionCurrent)),
    eventsUrl: read(ENV.eventsUrl),
    relay: read(ENV.relay) === undefined ? true : flag(ENV.relay, read(ENV.relay)),
    outboxNotify: read(ENV.outboxNotify) === undefined ? true : flag(ENV.outboxNotify, read(ENV.outboxNotify)),
    v8Pretenuring: flag(ENV.v8Pretenuring, read(ENV.v8Pretenuring)),
    ...dropUndefined(overrides),
  }
  if (config.providerUrl !== undefined) checkUrl(ENV.providerUrl, config.providerUrl)
  if (config.redisUrl !== undefined) checkUrl(ENV.redisUrl, config.redisUrl, ['redis:', 'rediss:'])
  // Secrets are described, never shown.
  if (config.cacheSecret !== undefined && Buffer.byteLength(config.cacheSecret) < 16) {
    throw new ConfigError(`${ENV.cacheSecret} must be at least 16 bytes; got ${Buffer.byteLength(config.cacheSecret)} bytes (not shown)`)
  }
  if (config.consoleToken !== undefined && config.consoleToken.length < 16) {
    throw new ConfigError(`${ENV.consoleToken} must be at least 16 characters; got ${config.consoleToken.length} characters (not shown)`)
  }
  if (config.eventsUrl !== undefined && !/^(nats|amqps?):\/\/./.test(config.eventsUrl)) {
    throw new ConfigError(`${ENV.eventsUrl} must be a nats:// or amqp:// URL; got ${JSON.stringify(withoutCredentials(config.eventsUrl))}`)
  }
  // The engine's own check, said here in the variables' names before anything starts.
  if (config.ttlMs <= config.staleAfterMs) {
    // Given only the TTL, the threshold it is measured against is a default the reader never set:
    // name the variable that lowers it, or the refusal reads as a TTL that can never be short.
    const unsetStale = read(ENV.staleAfterMs) === undefined && overrides.staleAfterMs === undefined
    const advice = unsetStale && config.ttlMs > 1 ? ` by default; for a TTL this short set ${ENV.staleAfterMs} below it as well` : ''
    throw new ConfigError(`${ENV.ttlMs} must be above ${ENV.staleAfterMs} (${config.staleAfterMs}${advice}); got ${config.ttlMs}`)
  }
  // A lower threshold would let the reconciler take over a claim whose owner still renews it.
  if (config.reconcileAfterMs !== 0 && config.reconcileAfterMs < config.staleAfterMs) {
    throw new ConfigError(`${ENV.reconcileAfterMs} must be 0 or at least ${ENV.staleAfterMs} (${config.staleAfterMs}); got ${config.reconcileAfterMs}`)
  }
  return Object.freeze(config)
}

export function integer(name: string, raw: string | undefined, fallback: number, range: { min: number; max?: number }): number {
  if (raw === undefined) return fallback
  const value = /^\d+$/.test(raw) ? Number(raw) : Number.NaN
  if (!Number.isSafeInteger(value) || value < range.min || (range.max !== undefined && value > range.max)) {
    const bound = range.max === undefined ? `at least ${range.min}` : `from ${range.min} to ${range.max}`
    throw new ConfigError(`${name} must be an integer ${bound}; got ${JSON.stringify(raw)}`)
  }
  return value
}

/**
 * `CONSOLE_PORT`: a port, or `off`. By default 3002 beside the default API port; beside any other
 * (a free one in tests, a second service, a deployment) a free one, so two services never clash.
 */
function consolePortFrom(raw: string | undefined, port: number): number | undefined {
  if (raw?.toLowerCase() === 'off') return undefined
  if (raw !== undefined && !/^\d+$/.test(raw)) throw new ConfigError(`${ENV.consolePort} must be a port from 0 to 65535, or off; got ${JSON.stringify(raw)}`)
  return integer(ENV.consolePort, raw, port === 3000 ? 3002 : 0, { min: 0, max: 65535 })
}

function flag(name: string, raw: string | undefined): boolean {
  if (raw === undefined) return false
  if (['1', 'true', 'yes', 'on'].includes(raw.toLowerCase())) return true
  if (['0', 'false', 'no', 'off'].includes(raw.toLowerCase())) return false
  throw new ConfigError(`${name} must be 1 or 0; got ${JSON.stringify(raw)}`)
}

function checkUrl(name: string, raw: string, protocols = ['http:', 'https:']): void {
  try {
    const url = new URL(raw)
    if (!protocols.includes(url.protocol)) throw new Error('another protocol')
  } catch {
    throw new ConfigError(`${name} must be a ${protocols.map((p) => p.slice(0, -1)).join(' or ')} URL; got ${JSON.stringify(withoutCredentials(raw))}`)
  }
}

/** A URL as a message shows it: a user and password become `***`. */
function withoutCredentials(raw: string): string {
  return raw.replace(/\/\/[^@/]*@/, '//***@')
}

function dropUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}
