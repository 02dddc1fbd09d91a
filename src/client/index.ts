/**
 * `oncely/client`: the client half. One key per logical operation, persisted before the first
 * attempt; retries only where a retry is safe.
 */
export { createClient, type OncelyClient, type CallOptions, type KeyedCallOptions, type CallInit } from './client.js'
export type { ClientOptions, ResolvedClientOptions, RetryEvent } from './options.js'
export type { ClientResponse } from './response.js'
export type { KeyAdvice } from './key-advice.js'
export { describeAttempt, type Attempt } from './attempt.js'
export { ClientGaveUpError, ClientAbortedError, ClientRequestFailedError } from './client-errors.js'
export type { KeyStore, OperationRecord, OperationOutcome } from './key-store.js'
export { memoryKeyStore, processKeyStore } from './memory-key-store.js'
export { fileKeyStore } from './file-key-store.js'
export { postgresKeyStore, type PostgresKeyStore, type PostgresKeyStoreOptions, type KeyStoreQueryable } from './postgres-key-store.js'
export { isRetryableStatus, isWorthRetrying } from './retry-policy.js'
export { parseRetryAfter, backoffDelay } from './backoff.js'
// eslint-disable-next-line @typescript-eslint/no-deprecated -- exported for one release, for users of the old name
export { fingerprintOperation, requestFingerprint } from './fingerprint.js'
export { redactUrl } from './redact-url.js'
export { mintKey } from './mint-key.js'
export type { RequestBody, JsonValue } from './request-body.js'
export { OncelyError, isOncelyError } from '../errors.js'
