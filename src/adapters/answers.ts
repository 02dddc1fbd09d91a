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
  // No longer answered (issue 23: a streamed response is recorded); kept for clients that branch on it.
  notReplayable: 'https://oncely.dev/problems/response-not-replayable',
  outcomeNotRecorded: 'https://oncely.dev/problems/outcome-not-recorded',
  storeUnavailable: 'https://oncely.dev/problems/idempotency-store-unavailable',
  bodyNotRead: 'https://oncely.dev/problems/request-body-not-read',
  invalidJson: 'https://oncely.dev/problems/invalid-json',
  bodyTooLarge: 'https://oncely.dev/problems/body-too-large',
  resultUnavailable: 'https://oncely.dev/problems/result-unavailable',
  recordUnreadable: 'https://oncely.dev/problems/record-unreadable',
})

/**
 * What a problem says the server knows of the key's operation (`operation_state`): `none`, no
 * record (nothing ran, or the claim was released before any step); `running`, a claim is held;
 * `suspended`, a claim waits for a retry to resume it; `completed` or `failed`, an outcome is
 * stored; `unknown`, the record could not be read.
 */
export type OperationState = 'none' | 'running' | 'suspended' | 'completed' | 'failed' | 'unknown'

/** What a client may safely do next, in every problem oncely answers (docs/adapters.md, Answers). */
export interface KeyAdvice {
  /** `retry_same_key`: the same request with the same key may get a different answer later. */
  retrySameKey: boolean
  /** `new_key_safe`: the server knows nothing ran for this request, so a new key cannot run it twice. */
  newKeySafe: boolean
  /** `operation_state`: the key's operation, as far as the server knows. */
  state: OperationState
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'

/** What a problem answer says (RFC 9457), with oncely's extension members. */
export interface ProblemInit {
  status: number
  type: string
  title: string
  detail: string
  /** Whether the same request with the same key may succeed later. */
  retryable: boolean
  /** What the client may do next; `retry_same_key` defaults to `retryable`. */
  advice: Omit<KeyAdvice, 'retrySameKey'> & { retrySameKey?: boolean }
  /** `key_ttl_seconds`: how long the route remembers a key, when it advertises it. */
  keyTtlSeconds?: number | undefined
  /** The request's `Idempotency-Key` as sent, echoed on 400 and 422 so a client can tell which. */
  idempotencyKey?: string | undefined
  /** Further members, after oncely's own. */
  extra?: Readonly<Record<string, string | number | boolean>>
  headers?: ReadonlyArray<readonly [string, string]>
}

/**
 * An `application/problem+json` answer (RFC 9457) with a fresh `instance` (`urn:uuid:…`) that
 * the log line about it repeats, `retryable`, what the client may do next (`retry_same_key`,
 * `new_key_safe`, `operation_state`), `key_ttl_seconds` and `idempotency_key` when given.
 */
export function problem(init: ProblemInit): HttpAnswer {
  const instance = `urn:uuid:${randomUUID()}`
  const { status, type, title, detail, retryable, idempotencyKey, advice, keyTtlSeconds } = init
  const members = {
    type,
    title,
    status,
    detail,
    instance,
    retryable,
    retry_same_key: advice.retrySameKey ?? retryable,
    new_key_safe: advice.newKeySafe,
    operation_state: advice.state,
    ...(keyTtlSeconds === undefined ? {} : { key_ttl_seconds: keyTtlSeconds }),
    ...(idempotencyKey === undefined ? {} : { idempotency_key: idempotencyKey }),
    ...init.extra,
  }
  const headers: Array<readonly [string, string]> = [['content-type', PROBLEM_CONTENT_TYPE], ...(init.headers ?? [])]
  return { status, headers, body: Buffer.from(JSON.stringify(members)), instance }
}

/** The stored response, verbatim, marked as a replay (and with `X-Idempotent-Replayed` when asked). */
export function replayAnswer(response: StoredResponse, alsoX: boolean): HttpAnswer {
  const marks: Array<readonly [string, string]> = alsoX ? [['idempotent-replayed', 'true'], ['x-idempotent-replayed', 'true']] : [['idempotent-replayed', 'true']]
  return { status: response.status, headers: [...response.headers, ...marks], body: response.body }
}

/** 409: a claim on the key is held; the same key gets its outcome later, a new key could run it twice. */
export function conflictAnswer(retryAfterSeconds: number, detail: string, keyTtlSeconds?: number): HttpAnswer {
  const advice = { newKeySafe: false, state: 'running' } as const
  return problem({ status: 409, type: PROBLEM_TYPES.keyInUse, title: 'Idempotency-Key in use', detail, retryable: true, advice, keyTtlSeconds, headers: [['retry-after', String(retryAfterSeconds)]] })
}

/**
 * 503: the database is away; the same key succeeds once it is back. What the key holds is not
 * known (`unknown`), so a new key is never called safe.
 */
export function storeUnavailableAnswer(detail: string, keyTtlSeconds?: number, state: OperationState = 'unknown'): HttpAnswer {
  const advice = { newKeySafe: false, state }
  return problem({ status: 503, type: PROBLEM_TYPES.storeUnavailable, title: 'Idempotency store unavailable', detail, retryable: true, advice, keyTtlSeconds, headers: [['retry-after', '1']] })
}
