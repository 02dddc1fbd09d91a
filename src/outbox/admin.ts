import type { Queryable } from '../store/postgres/executor.js'
import { bind, type OutboxBacklogRow, type OutboxListRow } from '../store/postgres/statements-outbox.js'
import { invalid } from '../option-validation.js'
import { createOutbox } from './outbox.js'

/** Where the operations below run. */
export interface OutboxAdminOptions {
  /** A pool (or any `Queryable`) on the outbox's database. */
  pool: Queryable
  /** Schema holding oncely's tables. (Default: `oncely`) */
  schema?: string
}

/**
 * Events in one state, oldest first: `dead` for `oncely outbox list --dead`.
 *
 * @example
 * ```ts
 * import { listEvents } from 'oncely/outbox'
 * for (const event of await listEvents({ pool, status: 'dead' })) console.log(event.id, event.last_error)
 * ```
 */
export async function listEvents(options: OutboxAdminOptions & { status: OutboxListRow['status']; limit?: number }): Promise<OutboxListRow[]> {
  const { statements } = createOutbox(schemaOf(options))
  return (await options.pool.query<OutboxListRow>(bind(statements.listByStatus, [options.status, options.limit ?? 100]))).rows
}

/** What `retryDeadEvents` did. */
export interface RetryDeadResult {
  /** The ids re-queued. */
  requeued: string[]
  /** Dead events left dead: older than `inboxRetentionMs`, so a consumer may have applied them and pruned the row that remembers it. */
  refused: string[]
}

/**
 * Re-queues dead events with a fresh attempt count: one by id, or all. They keep their place
 * in their key's order, so the events of the key waiting behind them follow. An id that is not
 * dead is not re-queued.
 *
 * A dead event may still have reached its consumers (a publish confirmed too late counts as a
 * failure). Their inbox remembers it only until `pruneInbox` deletes the row, so an event older
 * than `inboxRetentionMs` is refused: published again, it would be applied a second time. Give
 * the inbox's prune age less the time a re-queued event may take to arrive (the relay's retry
 * horizon and the consumer's redelivery horizon). `force: true` re-queues them anyway, for
 * events known never to have reached a consumer (`last_error` says why they failed).
 *
 * @example
 * ```ts
 * import { retryDeadEvents } from 'oncely/outbox'
 * const { requeued, refused } = await retryDeadEvents({ pool, ids: 'all', inboxRetentionMs: 13 * 86_400_000 })
 * ```
 */
export async function retryDeadEvents(
  options: OutboxAdminOptions & { ids: readonly string[] | 'all'; inboxRetentionMs?: number; force?: boolean },
): Promise<RetryDeadResult> {
  if (options.force !== undefined && typeof options.force !== 'boolean') throw invalid('force', 'must be a boolean', options.force)
  const maxAgeMs = options.force === true ? null : requiredRetention(options.inboxRetentionMs)
  const { statements } = createOutbox(schemaOf(options))
  const ids = options.ids === 'all' ? null : [...options.ids]
  const requeued: string[] = []
  if (ids === null) requeued.push(...(await options.pool.query<{ id: string }>(bind(statements.retryAllDead, [maxAgeMs]))).rows.map((row) => row.id))
  else {
    for (const id of ids) {
      const { rows } = await options.pool.query<{ id: string }>(bind(statements.retryDead, [id, maxAgeMs]))
      requeued.push(...rows.map((row) => row.id))
    }
  }
  const refused = maxAgeMs === null ? [] : (await options.pool.query<{ id: string }>(bind(statements.deadBefore, [maxAgeMs, ids]))).rows.map((row) => row.id)
  return { requeued, refused }
}

function requiredRetention(value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    throw invalid('inboxRetentionMs', 'must be a positive integer: how long the consumers keep inbox rows (or force: true)', value)
  }
  return value
}

/**
 * Deletes sent events older than `retentionMs`, in small batches; the relay runs it on its own
 * every `pruneIntervalMs`. Resolves to how many it deleted.
 *
 * @example
 * ```ts
 * import { pruneSentEvents } from 'oncely/outbox'
 * await pruneSentEvents({ pool, retentionMs: 7 * 86_400_000 })
 * ```
 */
export async function pruneSentEvents(options: OutboxAdminOptions & { retentionMs: number; batchSize?: number; maxBatches?: number }): Promise<number> {
  const { statements } = createOutbox(schemaOf(options))
  const batchSize = options.batchSize ?? 500
  let total = 0
  for (let batch = 0; batch < (options.maxBatches ?? 100); batch++) {
    const deleted = (await options.pool.query(bind(statements.pruneSent, [options.retentionMs, batchSize]))).rowCount ?? 0
    total += deleted
    if (deleted < batchSize) break
  }
  return total
}

/**
 * Events waiting, dead letters, and the age of the oldest waiting event: for metrics.
 *
 * @example
 * ```ts
 * import { outboxBacklog } from 'oncely/outbox'
 * const { pending, oldest_pending_age_seconds } = await outboxBacklog({ pool })
 * ```
 */
export async function outboxBacklog(options: OutboxAdminOptions): Promise<OutboxBacklogRow> {
  const { statements } = createOutbox(schemaOf(options))
  const row = (await options.pool.query<OutboxBacklogRow>(bind(statements.backlog, []))).rows[0]
  return row ?? { pending: 0, dead: 0, oldest_pending_age_seconds: 0 }
}

function schemaOf(options: OutboxAdminOptions): { schema?: string } {
  return options.schema === undefined ? {} : { schema: options.schema }
}
