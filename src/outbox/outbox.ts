import { createHash } from 'node:crypto'
import type { QueryConfig, Queryable } from '../store/postgres/executor.js'
import { DEFAULT_SCHEMA, quoteSchema } from '../store/postgres/schema-name.js'
import { bind, buildOutboxStatements, outboxChannel, type OutboxStatements } from '../store/postgres/statements-outbox.js'
import { withOrderingKey } from '../store/postgres/ordering-keys.js'
import { invalid } from '../option-validation.js'
import type { WriteStatement } from '../engine/types.js'
import { checkEvent, type CheckedEvent, type EnqueuedEvent, type OutboxEvent } from './event.js'
import { consumeOnce, type ConsumeResult, type InboxEntry } from './inbox.js'
import { assertInTransaction } from './in-transaction.js'
import { activeTraceparent } from './trace-context.js'
import { uuidv7 } from './uuid-v7.js'

export interface OutboxOptions {
  /** Schema holding oncely's tables. (Default: `oncely`) */
  schema?: string
  /**
   * Also `NOTIFY` the relay's channel in the writing transaction, so a listening relay wakes at
   * once instead of at its next poll. A NOTIFY takes a database-wide lock at commit, which
   * serialises the commits of every transaction that sends one: turn it off when commit
   * throughput matters more than the relay's latency (the poll interval then bounds it).
   * (Default: true)
   */
  notify?: boolean
  /**
   * With `notify`, at most one transaction of this outbox per this many milliseconds carries the
   * NOTIFY; the others only write their event. The relay looks again shortly after every batch it
   * published (`RelayOptions.followUpMs`), so it still finds them at once under load, and its poll
   * finds them in the rare case the transaction that carried the NOTIFY rolled back. `0` sends a
   * NOTIFY in every transaction. Measured on the reference service's own SQL, a NOTIFY in every
   * commit halves the database's commit rate (issue 21). (Default: 20)
   */
  notifyCoalesceMs?: number
  /** Prepare the statements once per connection; turn off behind PgBouncer in transaction mode. (Default: true) */
  preparedStatements?: boolean
}

/** An event and the statement that writes it, not yet sent (`Outbox.prepareEnqueue`). */
export interface PreparedEvent extends EnqueuedEvent {
  readonly statement: WriteStatement
}

/** The outbox's write side and the inbox, bound to one schema. */
export interface Outbox {
  readonly schema: string
  /**
   * Writes `event` in the caller's open transaction (Invariant 8): it commits, or rolls back,
   * with the caller's writes. Refuses a handle outside a transaction (`ONCELY_NOT_IN_TRANSACTION`).
   */
  enqueue(tx: Queryable, event: OutboxEvent): Promise<EnqueuedEvent>
  /**
   * The statement that writes `event`, unsent, for a completion that sends its writes as
   * statements (`execution.complete(response, { statements })`): that runs it inside the
   * completion's transaction, so the event commits with the completion or not at all (Invariant
   * 8). Never send it on its own in autocommit: nothing refuses it there. Pass the statement
   * object as it is: when flights share a transaction (`maxBatchSize`), the store recognises it
   * and takes the ordering locks of all their events' keys first, in one order; a copy is written
   * just the same, its lock taken where it stands.
   *
   * @example
   * ```ts
   * import { createOutbox } from 'oncely/outbox'
   * const outbox = createOutbox()
   * const event = await outbox.prepareEnqueue({ type: 'charge.succeeded', key: 'cus_1', payload: { id } })
   * const insertCharge = { text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] }
   * await execution.complete(response, { statements: [insertCharge, event.statement] })
   * ```
   */
  prepareEnqueue(event: OutboxEvent): Promise<PreparedEvent>
  /**
   * Records `(consumer, eventId)` in the consumer's open transaction and runs `handler` in it
   * only when the row is new: a redelivered event changes nothing (Invariant 13).
   */
  consume<T>(tx: Queryable, entry: InboxEntry, handler: (tx: Queryable) => Promise<T> | T): Promise<ConsumeResult<T>>
  /** The statements, for the relay and the operations tooling. */
  readonly statements: OutboxStatements
  /** The NOTIFY channel the relay listens on. */
  readonly channel: string
}

/**
 * The outbox of one schema.
 *
 * @example
 * ```ts
 * import { withTransaction } from 'oncely/postgres'
 * import { createOutbox } from 'oncely/outbox'
 * const outbox = createOutbox({ schema: 'oncely' })
 * await withTransaction(pool, async (tx) => {
 *   await tx.query({ text: 'INSERT INTO orders (id) VALUES ($1)', values: [42] })
 *   await outbox.enqueue(tx, { type: 'order.placed', key: 'cus_1', payload: { order: 42 } })
 * })
 * ```
 */
export function createOutbox(options: OutboxOptions = {}): Outbox {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const schema = options.schema ?? DEFAULT_SCHEMA
  const quoted = quoteSchema(schema)
  const notify = options.notify ?? true
  if (typeof notify !== 'boolean') throw invalid('notify', 'must be a boolean', notify)
  const coalesceMs = options.notifyCoalesceMs ?? DEFAULT_NOTIFY_COALESCE_MS
  if (!Number.isSafeInteger(coalesceMs) || coalesceMs < 0) throw invalid('notifyCoalesceMs', 'must be a whole number of milliseconds, 0 or more', coalesceMs)
  // When the last NOTIFY was handed out: the next one is due `coalesceMs` after it.
  let notifiedAt = Number.NEGATIVE_INFINITY
  const notifyNow = (): boolean => {
    if (!notify) return false
    if (coalesceMs === 0) return true
    const now = performance.now()
    if (now - notifiedAt < coalesceMs) return false
    notifiedAt = now
    return true
  }
  const prepared = options.preparedStatements ?? true
  if (typeof prepared !== 'boolean') throw invalid('preparedStatements', 'must be a boolean', prepared)
  const prefix = prepared ? `oncely_${createHash('sha256').update(quoted).digest('hex').slice(0, 8)}` : undefined
  const statements = buildOutboxStatements(quoted, prefix)
  const channel = outboxChannel(schema)
  const prepare = async (checked: CheckedEvent): Promise<EnqueuedEvent & { statement: QueryConfig }> => {
    const id = checked.id ?? uuidv7()
    const traceparent = checked.headers.traceparent ?? (await activeTraceparent())
    const headers = traceparent === undefined ? checked.headers : { ...checked.headers, traceparent }
    const values = [id, checked.type, checked.key, checked.payloadText, JSON.stringify(headers), checked.occurredAt.toISOString()]
    const bound = notifyNow() ? bind(statements.enqueueAndNotify, [...values, channel]) : bind(statements.enqueue, values)
    // An event without a key locks on its own id, which nobody else holds: nothing to order.
    const statement = checked.key === null ? bound : withOrderingKey(bound, checked.key)
    return { id, type: checked.type, key: checked.key, statement }
  }
  return Object.freeze({
    schema,
    statements,
    channel,
    async enqueue(tx: Queryable, event: OutboxEvent): Promise<EnqueuedEvent> {
      const checked = checkEvent(event)
      await assertInTransaction(tx, statements, 'enqueue')
      const { statement, ...enqueued } = await prepare(checked)
      await tx.query(statement)
      return enqueued
    },
    prepareEnqueue: (event: OutboxEvent) => prepare(checkEvent(event)),
    consume: <T>(tx: Queryable, entry: InboxEntry, handler: (tx: Queryable) => Promise<T> | T) => consumeOnce(statements, tx, entry, handler),
  })
}

/** `OutboxOptions.notifyCoalesceMs`'s default, and the relay's `followUpMs`. */
export const DEFAULT_NOTIFY_COALESCE_MS = 20

const defaultOutbox = createOutbox()

/**
 * Writes `event` in the caller's open transaction, in the default schema `oncely`; see
 * `createOutbox` for another schema.
 *
 * @example
 * ```ts
 * import { withTransaction } from 'oncely/postgres'
 * import { enqueue } from 'oncely/outbox'
 * await withTransaction(pool, async (tx) => {
 *   await enqueue(tx, { type: 'order.placed', key: 'cus_1', payload: { order: 42 } })
 * })
 * ```
 */
export function enqueue(tx: Queryable, event: OutboxEvent): Promise<EnqueuedEvent> {
  return defaultOutbox.enqueue(tx, event)
}

/**
 * Runs `handler` in the consumer's open transaction only if `(consumer, eventId)` is new there,
 * in the default schema `oncely`.
 *
 * @example
 * ```ts
 * import { withTransaction } from 'oncely/postgres'
 * import { consume } from 'oncely/outbox'
 * await withTransaction(pool, (tx) =>
 *   consume(tx, { consumer: 'billing', eventId: id }, async (tx) => {
 *     await tx.query({ text: 'UPDATE totals SET n = n + 1' })
 *   }))
 * ```
 */
export function consume<T>(tx: Queryable, entry: InboxEntry, handler: (tx: Queryable) => Promise<T> | T): Promise<ConsumeResult<T>> {
  return defaultOutbox.consume(tx, entry, handler)
}
