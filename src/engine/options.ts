import { invalid, positiveInteger } from '../option-validation.js'
import { withEncryption } from './encrypted-store.js'
import { resolveKeyring, type EncryptionOptions } from './encryption-keys.js'
import type { IdempotencyStore } from './store.js'

export interface EngineOptions<Tx = unknown> {
  /** Where keys are recorded: `createPostgresStore(...)`, or any `IdempotencyStore`. */
  store: IdempotencyStore<Tx>
  /** How long a key is remembered; after it, the same key is a new request. (Default: 86400000, 24 h) */
  ttlMs?: number
  /**
   * An `in_progress` claim whose lease is older than this may be taken over by a retry. Keep it
   * above the handler's p99 duration; the lease is renewed while a handler runs, so a live slow
   * handler is never taken over. (Default: 90000)
   */
  staleAfterMs?: number
  /** How often a running execution renews its lease. Must be below `staleAfterMs`. (Default: a third of `staleAfterMs`) */
  leaseRenewMs?: number
  /**
   * The `Retry-After` hint, in whole seconds, sent with a 409 while the key's owner keeps renewing
   * its lease. Once the owner has missed a renewal, the hint is the time until the claim can be
   * taken over instead. (Default: 1)
   */
  conflictRetryAfterSeconds?: number
  /**
   * How long one owner may hold a claim, from the moment it got it. Past it the owner stops
   * renewing and abandons the handler's outcome (its writes throw
   * `ONCELY_HANDLER_DEADLINE_EXCEEDED`), so a hung handler cannot hold its key forever: the claim
   * goes stale and a retry takes it over and resumes it. Never enforced by another worker taking
   * a live claim. Must be above `leaseRenewMs`. (Default: 600000, 10 minutes)
   */
  handlerDeadlineMs?: number
  /**
   * How long `begin` keeps retrying a transient database error (a lost connection, a deadlock, a
   * serialization failure, a lock or statement timeout) before giving up with
   * `ONCELY_STORE_UNAVAILABLE`. Writes after the claim retry for as long as the lease allows
   * instead. (Default: 2000)
   */
  claimRetryMs?: number
  /**
   * A duplicate waiting for the claim in flight (`waitMs`) reads the key's row first after this
   * long, then after pauses doubling up to `waitMaxPollMs`, each jittered. (Default: 10)
   */
  waitFirstPollMs?: number
  /** The longest pause between two reads of a waiting duplicate the store cannot wake. (Default: 200) */
  waitMaxPollMs?: number
  /**
   * The pause between two reads of a waiting duplicate while the store will wake it when the claim
   * ends (LISTEN/NOTIFY, `createPostgresStore`'s `listen`): the reads are then only the truth behind
   * the notification, for a claim that goes stale or a notification lost. Jittered. (Default: 1000)
   */
  waitWatchedPollMs?: number
  /**
   * Encryption at rest (AES-256-GCM): stored responses (headers and body) and step results are
   * sealed under `current` and opened by whichever listed key sealed them; status and
   * fingerprint stay in clear. A value that does not decrypt throws `ONCELY_DECRYPTION_FAILED`,
   * never replayed. See docs/encryption.md. (Default: none, stored in clear)
   */
  encryption?: EncryptionOptions
}

export type ResolvedEngineOptions<Tx = unknown> = Readonly<Required<Omit<EngineOptions<Tx>, 'encryption'>>>

export const DEFAULT_TTL_MS = 86_400_000
export const DEFAULT_STALE_AFTER_MS = 90_000
export const DEFAULT_HANDLER_DEADLINE_MS = 600_000
export const DEFAULT_CLAIM_RETRY_MS = 2000
export const DEFAULT_WAIT_FIRST_POLL_MS = 10
export const DEFAULT_WAIT_MAX_POLL_MS = 200
export const DEFAULT_WAIT_WATCHED_POLL_MS = 1000

/** Resolves, validates and freezes the options once, at start-up (docs/conventions.md, Shape). */
export function resolveEngineOptions<Tx>(options: EngineOptions<Tx>): ResolvedEngineOptions<Tx> {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const { store: given } = options
  if (typeof given !== 'object' || given === null || typeof given.claim !== 'function') {
    throw invalid('store', 'must be an IdempotencyStore such as createPostgresStore({ pool })', given)
  }
  // Outermost, so a cache behind it holds ciphertext too; no wrapper at all when it is off.
  const store = options.encryption === undefined ? given : withEncryption(given, resolveKeyring(options.encryption))
  const ttlMs = positiveInteger('ttlMs', options.ttlMs ?? DEFAULT_TTL_MS)
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const leaseRenewMs = positiveInteger('leaseRenewMs', options.leaseRenewMs ?? Math.max(1, Math.floor(staleAfterMs / 3)))
  if (leaseRenewMs >= staleAfterMs) throw invalid('leaseRenewMs', `must be below staleAfterMs (${staleAfterMs})`, leaseRenewMs)
  // Invariant 11: a live claim never expires under its owner, so its key must outlive its lease
  // (leaseRenewMs is below staleAfterMs, so this holds for it too).
  if (ttlMs <= staleAfterMs) throw invalid('ttlMs', `must be above staleAfterMs (${staleAfterMs})`, ttlMs)
  const conflictRetryAfterSeconds = positiveInteger('conflictRetryAfterSeconds', options.conflictRetryAfterSeconds ?? 1)
  const handlerDeadlineMs = positiveInteger('handlerDeadlineMs', options.handlerDeadlineMs ?? DEFAULT_HANDLER_DEADLINE_MS)
  if (handlerDeadlineMs <= leaseRenewMs) throw invalid('handlerDeadlineMs', `must be above leaseRenewMs (${leaseRenewMs})`, handlerDeadlineMs)
  const claimRetryMs = positiveInteger('claimRetryMs', options.claimRetryMs ?? DEFAULT_CLAIM_RETRY_MS)
  const waitFirstPollMs = positiveInteger('waitFirstPollMs', options.waitFirstPollMs ?? DEFAULT_WAIT_FIRST_POLL_MS)
  const waitMaxPollMs = positiveInteger('waitMaxPollMs', options.waitMaxPollMs ?? Math.max(DEFAULT_WAIT_MAX_POLL_MS, waitFirstPollMs))
  if (waitMaxPollMs < waitFirstPollMs) throw invalid('waitMaxPollMs', `must be at least waitFirstPollMs (${waitFirstPollMs})`, waitMaxPollMs)
  const waitWatchedPollMs = positiveInteger('waitWatchedPollMs', options.waitWatchedPollMs ?? DEFAULT_WAIT_WATCHED_POLL_MS)
  return Object.freeze({ store, ttlMs, staleAfterMs, leaseRenewMs, conflictRetryAfterSeconds, handlerDeadlineMs, claimRetryMs, waitFirstPollMs, waitMaxPollMs, waitWatchedPollMs })
}
