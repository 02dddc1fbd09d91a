import { invalid } from '../option-validation.js'
import type { Queryable } from '../store/postgres/executor.js'
import { bind, type OutboxStatements } from '../store/postgres/statements-outbox.js'
import { assertInTransaction } from './in-transaction.js'

/** Who applies an event, and which. */
export interface InboxEntry {
  /** The consumer's stable name: each consumer applies each event once. */
  consumer: string
  /** The event's id (the envelope's `id`, the `Nats-Msg-Id`, the AMQP `message_id`). */
  eventId: string
}

/** `applied`: the handler ran in this transaction; `duplicate`: the event was applied before. */
export type ConsumeResult<T> = { applied: true; value: T } | { applied: false }

export async function consumeOnce<T>(sql: OutboxStatements, tx: Queryable, entry: InboxEntry, handler: (tx: Queryable) => Promise<T> | T): Promise<ConsumeResult<T>> {
  if (typeof entry !== 'object' || entry === null) throw invalid('entry', 'must be an object { consumer, eventId }', entry)
  if (typeof entry.consumer !== 'string' || entry.consumer.length === 0) throw invalid('consumer', 'must be a non-empty string', entry.consumer)
  if (typeof entry.eventId !== 'string' || entry.eventId.length === 0) throw invalid('eventId', 'must be a non-empty string', entry.eventId)
  await assertInTransaction(tx, sql, 'consume')
  // Invariant 13: the insert and the handler's writes commit together; a second delivery finds
  // the row (or waits on the first's uncommitted one) and runs nothing.
  const inserted = await tx.query(bind(sql.inboxInsert, [entry.consumer, entry.eventId]))
  if ((inserted.rowCount ?? 0) === 0) return { applied: false }
  return { applied: true, value: await handler(tx) }
}
