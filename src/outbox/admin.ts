import type { Queryable } from '../store/postgres/executor.js'
import { bind, type OutboxBacklogRow, type OutboxListRow } from '../store/postgres/statements-outbox.js'
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

/**
 * Re-queues dead events with a fresh attempt count: one by id, or all. They keep their place
 * in their key's order, so the events of the key waiting behind them follow. Resolves to the
 * ids re-queued (an id that is not dead is not re-queued).
 *
 * @example
 * ```ts
 * import { retryDeadEvents } from 'oncely/outbox'
 * const requeued = await retryDeadEvents({ pool, ids: 'all' })
 * ```
 */
export async function retryDeadEvents(options: OutboxAdminOptions & { ids: readonly string[] | 'all' }): Promise<string[]> {
  const { statements } = createOutbox(schemaOf(options))
  if (options.ids === 'all') return (await options.pool.query<{ id: string }>(bind(statements.retryAllDead, []))).rows.map((row) => row.id)
  const requeued: string[] = []
  for (const id of options.ids) {
    const { rows } = await options.pool.query<{ id: string }>(bind(statements.retryDead, [id]))
    requeued.push(...rows.map((row) => row.id))
  }
  return requeued
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
