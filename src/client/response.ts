import type { OncelyError } from '../errors.js'
import type { Attempt } from './attempt.js'
import { keyAdviceOf, type KeyAdvice } from './key-advice.js'

/**
 * The final response of a call: read whole inside its attempt, so a connection cut halfway
 * through the body counts as a failed attempt, never as a truncated success.
 */
export interface ClientResponse {
  readonly status: number
  /** `status` is 2xx. */
  readonly ok: boolean
  readonly headers: Headers
  /** The body bytes, as received. */
  readonly body: Buffer
  /**
   * The server says this is the stored answer of an earlier request with the same key, not a
   * new execution: `Idempotent-Replayed: true` (or `X-Idempotent-Replayed: true`, which other
   * servers send).
   */
  readonly replayed: boolean
  /**
   * What the server says may be done next with the key (`retry_same_key`, `new_key_safe`,
   * `operation_state` of an oncely problem, and the `Idempotency-Key-TTL` header); every member
   * `undefined` when the server sent none.
   */
  readonly advice: KeyAdvice
  /** The `Idempotency-Key` the call carried (the same on every attempt). */
  readonly key: string | undefined
  /** Every attempt of the call, this response's last. */
  readonly attempts: readonly Attempt[]
  /**
   * Set when the response arrived but the key store could not mark its operation finished
   * (`ONCELY_KEY_STORE_FAILED`, the store's error as `cause`): it threw, did not answer within the
   * deadline, or had not answered a second after the call's signal aborted. The response is
   * still the operation's answer. Its record stays unfinished, so `prune` keeps it and a call with
   * the same `operationId` sends the same key again (the server replays its answer) and tries
   * the finish again. `undefined` otherwise, and on calls without an `operationId`.
   */
  readonly finishError: OncelyError | undefined
  /** The body as UTF-8 text. */
  text(): string
  /** The body parsed as JSON. */
  json<T = unknown>(): T
}

export function clientResponse(
  status: number,
  headers: Headers,
  body: Buffer,
  key: string | undefined,
  attempts: readonly Attempt[],
  finishError?: OncelyError,
): ClientResponse {
  return Object.freeze({
    status,
    ok: status >= 200 && status <= 299,
    headers,
    replayed: isTrue(headers.get('idempotent-replayed')) || isTrue(headers.get('x-idempotent-replayed')),
    body,
    advice: keyAdviceOf(headers, body),
    key,
    attempts,
    finishError,
    text: () => body.toString('utf8'),
    json: <T = unknown>() => JSON.parse(body.toString('utf8')) as T,
  })
}

function isTrue(value: string | null): boolean {
  return value?.trim().toLowerCase() === 'true'
}

/** `response`, reporting that the key store could not mark its operation finished. */
export function withFinishError(response: ClientResponse, finishError: OncelyError): ClientResponse {
  return clientResponse(response.status, response.headers, response.body, response.key, response.attempts, finishError)
}
