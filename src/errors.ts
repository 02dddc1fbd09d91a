/**
 * Every error oncely throws is an `OncelyError` with a stable `code`; each code is documented in
 * `docs/errors.md` (a test fails when one is not). Protocol answers (replay, conflict, mismatch)
 * are values, not errors: only real faults throw.
 */
export const ERROR_CODES = {
  ONCELY_INVALID_OPTION: 'an option given to oncely is missing, of the wrong type or out of range',
  ONCELY_LOCK_LOST: 'the claim was taken over by another worker; this worker may no longer write',
  ONCELY_CLAIM_FINISHED: 'the execution already completed, failed, released or suspended its claim',
  ONCELY_STEP_RESULT_NOT_JSON: 'a step returned a value that cannot be stored as JSON',
  ONCELY_MIGRATION_FAILED: 'a schema migration failed and was rolled back',
  ONCELY_SCHEMA_TOO_NEW: 'the database holds a breaking migration this version of oncely does not know',
  ONCELY_MIGRATION_LOCKED: 'the migration lock, or a table a migration alters, stayed held past the migration deadline',
  ONCELY_STORE_UNEXPECTED: 'the database answered in a way the store cannot interpret',
  ONCELY_STORE_UNAVAILABLE: 'the database could not be reached, or kept failing transiently, within the time the claim allows',
  ONCELY_OUTCOME_NOT_RECORDED: 'the outcome could not be stored for a reason a retry will not fix; the claim is kept suspended with the error recorded',
  ONCELY_NOT_IN_TRANSACTION: 'the outbox or the inbox was given a database handle that is not inside a transaction',
  ONCELY_INVALID_EVENT: 'an event given to the outbox is malformed: its type, key, payload or headers',
  ONCELY_PUBLISH_FAILED: 'a publisher could not hand an event to its broker, or the broker refused or returned it',
  ONCELY_HANDLER_DEADLINE_EXCEEDED: 'the handler held its claim past handlerDeadlineMs; its outcome was abandoned and a retry takes the claim over',
  ONCELY_INVALID_SCOPE: 'the scope given to the engine is not a non-empty string or a finite number',
  ONCELY_RESPONSE_NOT_REPLAYABLE: 'a guarded route produced a response that cannot be stored and replayed',
  ONCELY_CLIENT_GAVE_UP: 'the client stopped retrying: attempts or deadline exhausted; every attempt is attached',
  ONCELY_CLIENT_OPERATION_MISMATCH: 'an operationId was reused with a different request; nothing was sent',
  ONCELY_CLIENT_ABORTED: 'the caller aborted the request through its AbortSignal',
  ONCELY_CLIENT_REQUEST_FAILED: 'an attempt failed for a reason that is not a network failure, so it was not retried',
  ONCELY_DECRYPTION_FAILED: 'a stored value is encrypted and does not decrypt: its key id is not configured, the key is wrong, or the value was altered',
  ONCELY_KEY_STORE_FAILED: 'the client key store could not read or persist a key',
  ONCELY_PEER_MISSING: 'a part of oncely was used that needs an optional peer dependency which is not installed',
} as const

export type OncelyErrorCode = keyof typeof ERROR_CODES

/**
 * @example
 * ```ts
 * import { OncelyError } from 'oncely'
 * try {
 *   await execution.complete({ status: 201, headers: [], body: Buffer.from('{}') })
 * } catch (error) {
 *   if (error instanceof OncelyError && error.code === 'ONCELY_LOCK_LOST') {
 *     // another worker owns the key now: do not answer from here
 *   }
 * }
 * ```
 */
export class OncelyError extends Error {
  override name = 'OncelyError'
  readonly code: OncelyErrorCode

  constructor(code: OncelyErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
  }
}

export function isOncelyError(error: unknown, code?: OncelyErrorCode): error is OncelyError {
  return error instanceof OncelyError && (code === undefined || error.code === code)
}
