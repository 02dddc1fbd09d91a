import { describeKind, invalid, invalidHidden, positiveInteger } from '../option-validation.js'
import type { PoolLike } from '../store/postgres/executor.js'
import { DEFAULT_SCHEMA } from '../store/postgres/schema-name.js'
import type { Publisher } from './publisher.js'
import { DEFAULT_NOTIFY_COALESCE_MS } from './outbox.js'

export interface RelayOptions {
  /** A `pg`-shaped pool on the outbox's database; the LISTEN connection is checked out of it. (Default: none, required) */
  pool: PoolLike
  /** Where events go. (Default: none, required) */
  publisher: Publisher
  /** Schema holding oncely's tables. (Default: `oncely`) */
  schema?: string
  /** Events claimed per batch, heads and the events behind them together. (Default: 100) */
  batchSize?: number
  /** How long a claimed batch is this relay's; after it, another relay may publish it again. (Default: 30000) */
  leaseMs?: number
  /** A publish not confirmed within this is a failure (retried). Must be below `leaseMs`. (Default: 10000) */
  publishTimeoutMs?: number
  /** The truth: the outbox is read at least this often, whatever notifications do. (Default: 1000) */
  pollIntervalMs?: number
  /** Wake up on the outbox's `NOTIFY` through a dedicated connection; turn off behind PgBouncer in transaction mode. (Default: true) */
  listen?: boolean
  /**
   * Prepare the relay's claim of heads once per connection; turn off behind PgBouncer in
   * transaction mode before 1.21, where a named statement collides on the shared server
   * connection. The followers' claim and the marks are never prepared: planned at every run, for
   * the outbox as it has grown since. (Default: true)
   */
  preparedStatements?: boolean
  /**
   * After a batch that published, the relay looks again this long later (twice) before it waits
   * for the poll: writers send at most one NOTIFY per `OutboxOptions.notifyCoalesceMs`, so the
   * events of the transactions in between are found here, not a poll interval later. Under load
   * it is also the pace of the relay's batches: after one that was not full, the next is claimed
   * this long later (or at the next NOTIFY), so each carries what was committed meanwhile; a
   * full batch is followed at once. Keep it at or above the writers' `notifyCoalesceMs`.
   * (Default: 20)
   */
  followUpMs?: number
  /** Publishes in flight at once, across ordering keys; one key's events go one at a time. (Default: 16) */
  maxInFlight?: number
  /** Attempts before an event is dead-lettered. (Default: 10) */
  maxAttempts?: number
  /** First backoff delay after a failed publish; doubles per attempt. (Default: 1000) */
  backoffBaseMs?: number
  /** The backoff's cap. (Default: 300000) */
  backoffMaxMs?: number
  /** Sent events are deleted after this long; 0 keeps them. (Default: 604800000, 7 days) */
  retentionMs?: number
  /** How often the relay prunes sent events. (Default: 60000) */
  pruneIntervalMs?: number
  /** Where the relay writes what it does not throw: dead letters, lost connections, warnings. (Default: `console.warn`) */
  log?: (line: string) => void
}

export type ResolvedRelayOptions = Readonly<Required<Omit<RelayOptions, 'schema'>> & { schema: string }>

export function resolveRelayOptions(options: RelayOptions): ResolvedRelayOptions {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const { pool, publisher } = options
  if (typeof pool !== 'object' || pool === null || typeof pool.query !== 'function' || typeof pool.connect !== 'function') {
    throw invalidHidden('pool', 'must have query() and connect(), like pg.Pool', describeKind(pool))
  }
  if (typeof publisher !== 'object' || publisher === null || typeof publisher.publish !== 'function' || typeof publisher.close !== 'function') {
    throw invalid('publisher', 'must be a Publisher: { name, publish(message), close() }', publisher)
  }
  const leaseMs = positiveInteger('leaseMs', options.leaseMs ?? 30_000)
  const publishTimeoutMs = positiveInteger('publishTimeoutMs', options.publishTimeoutMs ?? Math.min(10_000, Math.floor(leaseMs / 2)))
  if (publishTimeoutMs >= leaseMs) throw invalid('publishTimeoutMs', `must be below leaseMs (${leaseMs})`, publishTimeoutMs)
  const backoffBaseMs = positiveInteger('backoffBaseMs', options.backoffBaseMs ?? 1000)
  const backoffMaxMs = positiveInteger('backoffMaxMs', options.backoffMaxMs ?? 300_000)
  if (backoffMaxMs < backoffBaseMs) throw invalid('backoffMaxMs', `must be at least backoffBaseMs (${backoffBaseMs})`, backoffMaxMs)
  const retentionMs = options.retentionMs ?? 604_800_000
  if (!Number.isSafeInteger(retentionMs) || retentionMs < 0) throw invalid('retentionMs', 'must be a whole number of milliseconds', retentionMs)
  const listen = options.listen ?? true
  if (typeof listen !== 'boolean') throw invalid('listen', 'must be a boolean', listen)
  const preparedStatements = options.preparedStatements ?? true
  if (typeof preparedStatements !== 'boolean') throw invalid('preparedStatements', 'must be a boolean', preparedStatements)
  const log = options.log ?? ((line: string) => console.warn(line))
  if (typeof log !== 'function') throw invalid('log', 'must be a function', log)
  return Object.freeze({
    pool,
    publisher,
    schema: options.schema ?? DEFAULT_SCHEMA,
    batchSize: positiveInteger('batchSize', options.batchSize ?? 100),
    leaseMs,
    publishTimeoutMs,
    pollIntervalMs: positiveInteger('pollIntervalMs', options.pollIntervalMs ?? 1000),
    listen,
    preparedStatements,
    followUpMs: positiveInteger('followUpMs', options.followUpMs ?? DEFAULT_NOTIFY_COALESCE_MS),
    maxInFlight: positiveInteger('maxInFlight', options.maxInFlight ?? 16),
    maxAttempts: positiveInteger('maxAttempts', options.maxAttempts ?? 10),
    backoffBaseMs,
    backoffMaxMs,
    retentionMs,
    pruneIntervalMs: positiveInteger('pruneIntervalMs', options.pruneIntervalMs ?? 60_000),
    log,
  })
}
