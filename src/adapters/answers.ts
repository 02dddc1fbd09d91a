import { randomUUID } from 'node:crypto'
import type { StoredResponse } from '../engine/types.js'

/** A complete response an adapter sends: status, header pairs, body bytes. */
export interface HttpAnswer {
  status: number
  headers: ReadonlyArray<readonly [string, string]>
  body: Uint8Array
  /** The problem's `instance` (a `urn:uuid:`), for the log line that goes with it. */
  instance?: string
}

/** Stable problem `type` URIs (RFC 9457); clients may branch on them. */
export const PROBLEM_TYPES = Object.freeze({
  keyMissing: 'https://oncely.dev/problems/idempotency-key-missing',
  keyInvalid: 'https://oncely.dev/problems/idempotency-key-invalid',
  keyInUse: 'https://oncely.dev/problems/idempotency-key-in-use',
  keyReused: 'https://oncely.dev/problems/idempotency-key-reused',
  unauthenticated: 'https://oncely.dev/problems/unauthenticated',
  notReplayable: 'https://oncely.dev/problems/response-not-replayable',
  outcomeNotRecorded: 'https://oncely.dev/problems/outcome-not-recorded',
  storeUnavailable: 'https://oncely.dev/problems/idempotency-store-unavailable',
  bodyNotRead: 'https://oncely.dev/problems/request-body-not-read',
  invalidJson: 'https://oncely.dev/problems/invalid-json',
  bodyTooLarge: 'https://oncely.dev/problems/body-too-large',
})

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'

/** What a problem answer says (RFC 9457), with oncely's extension members. */
export interface ProblemInit {
  status: number
  type: string
  title: string
  detail: string
  /** Whether the same request with the same key may succeed later. */
  retryable: boolean
  /** The request's `Idempotency-Key` as sent, echoed on 400 and 422 so a client can tell which. */
  idempotencyKey?: string | undefined
  headers?: ReadonlyArray<readonly [string, string]>
}

/**
 * An `application/problem+json` answer (RFC 9457) with a fresh `instance` (`urn:uuid:…`) that
 * the log line about it repeats, `retryable`, and `idempotency_key` when given.
 */
export function problem(init: ProblemInit): HttpAnswer {
  const instance = `urn:uuid:${randomUUID()}`
  const { status, type, title, detail, retryable, idempotencyKey } = init
  const members = { type, title, status, detail, instance, retryable, ...(idempotencyKey === undefined ? {} : { idempotency_key: idempotencyKey }) }
  const headers: Array<readonly [string, string]> = [['content-type', PROBLEM_CONTENT_TYPE], ...(init.headers ?? [])]
  return { status, headers, body: Buffer.from(JSON.stringify(members)), instance }
}

/**
 * Retryable statuses: the answer says "not now", never "not this", so nothing is stored and the
 * key stays retryable (released or suspended).
 */
export function isRetryableStatus(status: number): boolean {
  return (status >= 500 && status <= 599) || status === 408 || status === 409 || status === 425 || status === 429
}

/** The stored response, verbatim, marked as a replay (and with `X-Idempotent-Replayed` when asked). */
export function replayAnswer(response: StoredResponse, alsoX: boolean): HttpAnswer {
  const marks: Array<readonly [string, string]> = alsoX ? [['idempotent-replayed', 'true'], ['x-idempotent-replayed', 'true']] : [['idempotent-replayed', 'true']]
  return { status: response.status, headers: [...response.headers, ...marks], body: response.body }
}

export function conflictAnswer(retryAfterSeconds: number, detail: string): HttpAnswer {
  return problem({ status: 409, type: PROBLEM_TYPES.keyInUse, title: 'Idempotency-Key in use', detail, retryable: true, headers: [['retry-after', String(retryAfterSeconds)]] })
}

/** 503: the database is away; the same key succeeds once it is back. */
export function storeUnavailableAnswer(detail: string): HttpAnswer {
  return problem({ status: 503, type: PROBLEM_TYPES.storeUnavailable, title: 'Idempotency store unavailable', detail, retryable: true, headers: [['retry-after', '1']] })
}
