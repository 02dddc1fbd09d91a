import { OncelyError } from '../errors.js'

/** An event to write in the caller's transaction. */
export interface OutboxEvent {
  /** What happened, e.g. `charge.succeeded`: letters, digits, `.`, `_`, `-`. Also the subject or routing key's suffix. */
  type: string
  /**
   * The ordering key, e.g. the customer: events with the same key are published in the order
   * their transactions committed. Omit it for an event with no order. (Default: none)
   */
  key?: string
  /** The event's data: plain JSON, published as `data` exactly as `JSON.stringify` writes it. */
  payload: unknown
  /** Extra headers carried to the broker; a `traceparent` is added when a trace is active. (Default: `{}`) */
  headers?: Record<string, string>
  /** When it happened. (Default: now) */
  occurredAt?: Date
  /** The event id, a UUID. (Default: a new UUIDv7) */
  id?: string
}

/** An event as it was written, with its id. */
export interface EnqueuedEvent {
  id: string
  type: string
  key: string | null
}

const TYPE = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** The validated parts of an event, ready to bind. */
export interface CheckedEvent {
  type: string
  key: string | null
  payloadText: string
  headers: Record<string, string>
  occurredAt: Date
  id: string | undefined
}

export function checkEvent(event: OutboxEvent): CheckedEvent {
  if (typeof event !== 'object' || event === null) throw bad('the event must be an object')
  if (typeof event.type !== 'string' || event.type.length > 200 || !TYPE.test(event.type)) {
    throw bad(`type must be dot-separated words of letters, digits, _ or -; got ${JSON.stringify(event.type)}`)
  }
  if (event.key !== undefined && (typeof event.key !== 'string' || event.key.length === 0)) throw bad(`key must be a non-empty string; got ${JSON.stringify(event.key)}`)
  let payloadText: string | undefined
  try {
    payloadText = JSON.stringify(event.payload)
  } catch (cause) {
    throw bad(`payload of ${event.type} cannot be written as JSON: ${(cause as Error).message}`)
  }
  if (payloadText === undefined) throw bad(`payload of ${event.type} cannot be written as JSON`)
  const headers = event.headers ?? {}
  if (typeof headers !== 'object' || headers === null || Object.values(headers).some((value) => typeof value !== 'string')) {
    throw bad('headers must be an object of strings')
  }
  if (event.occurredAt !== undefined && !(event.occurredAt instanceof Date && Number.isFinite(event.occurredAt.getTime()))) throw bad('occurredAt must be a valid Date')
  if (event.id !== undefined && (typeof event.id !== 'string' || !UUID.test(event.id))) throw bad(`id must be a UUID; got ${JSON.stringify(event.id)}`)
  return { type: event.type, key: event.key ?? null, payloadText, headers: { ...headers }, occurredAt: event.occurredAt ?? new Date(), id: event.id }
}

function bad(detail: string): OncelyError {
  return new OncelyError('ONCELY_INVALID_EVENT', detail)
}
