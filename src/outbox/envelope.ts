import type { OutboxEventRow } from '../store/postgres/statements-outbox.js'

/** The version of the envelope below, sent as a header beside the body. */
export const ENVELOPE_SCHEMA_VERSION = '1'
export const ENVELOPE_CONTENT_TYPE = 'application/json'

/** One event as a publisher hands it to a broker. */
export interface OutboxMessage {
  /** The event id: the broker's dedupe id (`Nats-Msg-Id`, AMQP `message_id`). */
  id: string
  type: string
  /** The ordering key, or null. */
  key: string | null
  occurredAt: Date
  /**
   * The body: `{"id","type","occurred_at","data"}`, `data` being the payload's JSON text exactly
   * as it was written.
   */
  body: Buffer
  /** Headers to carry: the event's own, then `content-type` and `oncely-schema-version`. */
  headers: Readonly<Record<string, string>>
  /** This publish attempt, from 1. */
  attempt: number
}

export function toMessage(row: OutboxEventRow): OutboxMessage {
  const occurredAt = new Date(row.occurred_at)
  // The payload text goes in verbatim: parsing and re-serialising could change its bytes.
  const body = `{"id":${JSON.stringify(row.id)},"type":${JSON.stringify(row.type)},"occurred_at":${JSON.stringify(occurredAt.toISOString())},"data":${row.payload}}`
  return {
    id: row.id,
    type: row.type,
    key: row.ordering_key,
    occurredAt,
    body: Buffer.from(body, 'utf8'),
    headers: { ...row.headers, 'content-type': ENVELOPE_CONTENT_TYPE, 'oncely-schema-version': ENVELOPE_SCHEMA_VERSION },
    attempt: row.attempts,
  }
}

/** The envelope a consumer receives. */
export interface EventEnvelope<Data = unknown> {
  id: string
  type: string
  occurred_at: string
  data: Data
}

/** Parses a body into an envelope, or undefined when it is not one. */
export function parseEnvelope(body: Uint8Array): EventEnvelope | undefined {
  let value: unknown
  try {
    value = JSON.parse(Buffer.from(body).toString('utf8'))
  } catch {
    return undefined
  }
  if (typeof value !== 'object' || value === null) return undefined
  const { id, type, occurred_at: occurredAt } = value as Record<string, unknown>
  if (typeof id !== 'string' || id.length === 0 || typeof type !== 'string' || typeof occurredAt !== 'string') return undefined
  return value as EventEnvelope
}
