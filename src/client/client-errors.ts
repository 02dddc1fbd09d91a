import { OncelyError } from '../errors.js'
import type { Attempt } from './attempt.js'
import type { ClientResponse } from './response.js'

/**
 * The client stopped retrying (`ONCELY_CLIENT_GAVE_UP`): `maxAttempts` used, or the deadline
 * reached. The key stays in the key store: calling again with the same `operationId` resumes
 * the same operation.
 *
 * @example
 * ```ts
 * import { ClientGaveUpError, createClient, describeAttempt } from 'oncely/client'
 * const client = createClient({ baseUrl: 'http://127.0.0.1:3000' })
 * try {
 *   await client.post('/v1/charges', { amount: 1000 }, { operationId: 'order-42:charge' })
 * } catch (error) {
 *   if (error instanceof ClientGaveUpError) console.error(error.attempts.map(describeAttempt))
 * }
 * ```
 */
export class ClientGaveUpError extends OncelyError {
  /** Every attempt, in order. */
  readonly attempts: readonly Attempt[]
  /** The last response received, when the last attempt got one (a 503, a 429…). */
  readonly response: ClientResponse | undefined

  constructor(message: string, attempts: readonly Attempt[], response: ClientResponse | undefined) {
    super('ONCELY_CLIENT_GAVE_UP', message, { cause: attempts.at(-1)?.error })
    this.attempts = attempts
    this.response = response
  }
}

/**
 * The caller's `AbortSignal` fired (`ONCELY_CLIENT_ABORTED`); `cause` is the signal's reason.
 * The key stays in the key store.
 *
 * @example
 * ```ts
 * import { ClientAbortedError, createClient } from 'oncely/client'
 * const client = createClient({ baseUrl: 'http://127.0.0.1:3000' })
 * const res = await client.post('/v1/charges', { amount: 1000 }, { signal: AbortSignal.timeout(5_000) })
 *   .catch((error: unknown) => (error instanceof ClientAbortedError ? undefined : Promise.reject(error)))
 * ```
 */
export class ClientAbortedError extends OncelyError {
  /** The attempts made before the abort. */
  readonly attempts: readonly Attempt[]

  constructor(message: string, attempts: readonly Attempt[], reason: unknown) {
    super('ONCELY_CLIENT_ABORTED', message, { cause: reason })
    this.attempts = attempts
  }
}

/**
 * An attempt failed for a reason that is not a network failure (`ONCELY_CLIENT_REQUEST_FAILED`),
 * so it is not retried: the same request would fail the same way (a port fetch refuses, a TLS
 * certificate refused, a response body that cannot be decoded). `cause` is fetch's error. The
 * key stays in the key store: once the cause is fixed, the same `operationId` resumes.
 *
 * @example
 * ```ts
 * import { ClientRequestFailedError, createClient } from 'oncely/client'
 * const client = createClient({ baseUrl: 'http://127.0.0.1:3000' })
 * await client.post('/v1/charges', { amount: 1000 }).catch((error: unknown) => {
 *   if (error instanceof ClientRequestFailedError) console.error(error.message)
 * })
 * ```
 */
export class ClientRequestFailedError extends OncelyError {
  /** Every attempt, in order; the last one failed with `cause`. */
  readonly attempts: readonly Attempt[]

  constructor(message: string, attempts: readonly Attempt[], cause: unknown) {
    super('ONCELY_CLIENT_REQUEST_FAILED', message, { cause })
    this.attempts = attempts
  }
}
