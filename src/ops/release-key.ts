import { hostname, userInfo } from 'node:os'
import { DEFAULT_STALE_AFTER_MS } from '../engine/options.js'
import { positiveInteger } from '../option-validation.js'
import { resolveAdminDatabase, type AdminDatabase } from './admin-database.js'
import { detailsOf, readKeyRow, type KeyDetails } from './keys.js'
import { logKey, resolveLogger, type LogOption } from '../logger.js'
import { publishEngineEvent } from '../engine/events.js'

/** What a cache in front of the store must offer so a release never leaves a stale answer in it. */
export interface EvictableCache {
  evict(scope: string, key: string): Promise<void>
}

export interface ReleaseKeyOptions {
  scope: string
  key: string
  /**
   * Release a claim that may have acted (a step result, a suspension, a stored outcome, or an
   * owner that died without saying whether a step began). The next request with the key then
   * runs as a new operation with new provider keys: check the ones in the result first. A claim
   * a live worker holds is refused even so. (Default: false)
   */
  force?: boolean
  /** The engine's stale threshold: a claim whose lease is younger is held by a live worker. (Default: 90000) */
  staleAfterMs?: number
  /** Who releases, for the audit line. (Default: the process's user@host) */
  actor?: string
  /** Where the audit line goes: a pino-style logger or a line function. (Default: `console.warn`) */
  log?: LogOption
  /** A cache in front of the store (such as the Redis cache), evicted after the release. (Default: none) */
  cache?: EvictableCache
  /**
   * Asked before a forced release, with the key as it was read: a reason refuses it (`reason:
   * 'refused'`, nothing changed). The delete matches the state read, so a key that settles after
   * the check is not released. The console uses it to ask a token and a typed confirmation for a
   * key with a stored outcome. (Default: none, every force is allowed)
   */
  checkForce?: (key: KeyDetails) => string | undefined
}

/** Why a release was refused; nothing was changed. */
export type ReleaseRefusal =
  | { released: false; reason: 'not-found'; detail: string }
  /** An owner renews the lease: it is running now. Wait for it, or for its maximum age. */
  | { released: false; reason: 'held'; detail: string; key: KeyDetails }
  /** The claim may have had a side effect: `force` releases it anyway. */
  | { released: false; reason: 'may-have-acted'; detail: string; key: KeyDetails }
  /** `checkForce` refused the forced release, for `detail`. */
  | { released: false; reason: 'refused'; detail: string; key: KeyDetails }
  /** The row changed between the read and the delete (renewed, taken over, settled): look again. */
  | { released: false; reason: 'changed'; detail: string }

export type ReleaseResult = { released: true; detail: string; key: KeyDetails; forced: boolean } | ReleaseRefusal

/**
 * Deletes a key so that the next request with it runs as a new operation: the one way to make a
 * retry start over. Refuses a claim a live worker holds, and, unless `force`, a claim that may
 * have acted (Invariant 11): releasing one would let the next retry call the outside world with
 * new provider keys. The delete matches only the exact state that was read, so an owner that
 * renewed or a retry that took the claim over meanwhile keeps it. Writes one audit line.
 *
 * @example
 * ```ts
 * import { releaseKey } from 'oncely/ops'
 * const result = await releaseKey({ pool }, { scope: '42', key: 'order-42', actor: 'alice' })
 * if (!result.released && result.reason === 'may-have-acted') console.log(result.key.steps)
 * ```
 */
export async function releaseKey(target: AdminDatabase, options: ReleaseKeyOptions): Promise<ReleaseResult> {
  const { db, sql } = resolveAdminDatabase(target)
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const log = resolveLogger(options.log)
  const actor = options.actor ?? defaultActor()
  const scope = String(options.scope)
  const key = String(options.key)
  const row = await readKeyRow(target, { scope, key, staleAfterMs })
  if (row === undefined) return { released: false, reason: 'not-found', detail: `user ${scope} has no key ${JSON.stringify(key)}` }
  const details = detailsOf(row)
  if (details.state === 'running') {
    return { released: false, reason: 'held', detail: `a live worker holds it (lease renewed ${details.leaseAgeMs} ms ago); wait until it settles or goes stale`, key: details }
  }
  const acted = actedReason(details)
  const forced = options.force === true
  if (acted !== undefined && !forced) {
    return { released: false, reason: 'may-have-acted', detail: `${acted}; releasing would make the next retry a new operation with new provider keys. Check them, then force`, key: details }
  }
  const refusal = acted === undefined ? undefined : options.checkForce?.(details)
  if (refusal !== undefined) {
    log.warn({ audit: 'release-refused', actor, scope, key: logKey(key), claimId: details.claimId, state: details.state, reason: refusal }, 'forced release of an idempotency key refused')
    return { released: false, reason: 'refused', detail: refusal, key: details }
  }
  const { rows } = await db.query<{ claim_id: string }>({
    text: sql.releaseKey,
    values: [scope, key, details.claimId, row.fence_token, row.locked_at, row.status, staleAfterMs],
  })
  if (rows.length === 0) return { released: false, reason: 'changed', detail: 'the key changed while it was being released (renewed, taken over or settled); nothing was deleted' }
  log.warn(
    { audit: 'release', actor, scope, key: logKey(key), claimId: details.claimId, state: details.state, forced: acted !== undefined, providerKeys: details.steps.map((s) => s.providerKey) },
    'idempotency key released',
  )
  publishEngineEvent({ event: 'released', scope, key, claimId: details.claimId, by: 'operator', actor, forced: acted !== undefined })
  if (options.cache) {
    try {
      await options.cache.evict(scope, key)
    } catch (error) {
      // Invariant 10: the cache is never the record; an entry it keeps must prove itself current.
      log.error({ scope, key: logKey(key), error: String(error) }, 'released key could not be evicted from the cache')
    }
  }
  return { released: true, forced: acted !== undefined, key: details, detail: `released: the next request with this key runs as a new operation${acted === undefined ? '' : ` (${acted})`}` }
}

/**
 * Why a claim may have had a side effect, or undefined when it cannot have. An owner that died
 * leaves no record of a step it entered but did not commit (its provider call may have
 * succeeded), so a stuck claim counts as acted on too.
 */
export function actedReason(key: KeyDetails): string | undefined {
  if (key.status !== 'in_progress') {
    return key.expired ? undefined : `it holds a stored ${key.status} outcome (status ${key.responseStatus}) that retries replay`
  }
  if (key.steps.length > 0) return `step results are recorded (${key.steps.map((s) => s.name).join(', ')})`
  if (key.state === 'suspended') return `it was suspended after its handler began${key.outcomeError === null ? '' : ` (its outcome could not be stored: ${key.outcomeError})`}`
  if (key.interrupted) return 'it was taken over after an earlier owner stopped (that owner may have acted)'
  return 'its owner stopped renewing without recording whether a step began (its provider call may have happened)'
}

function defaultActor(): string {
  try {
    return `${userInfo().username}@${hostname()}`
  } catch {
    return `pid ${process.pid}@${hostname()}`
  }
}
