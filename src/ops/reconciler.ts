import { randomUUID } from 'node:crypto'
import type { Engine } from '../engine/engine.js'
import { OncelyError } from '../errors.js'
import { invalid, positiveInteger } from '../option-validation.js'
import { settledBy } from '../engine/completion.js'
import { FencedWriter } from '../engine/fenced-write.js'
import { Lease } from '../engine/lease.js'
import { deriveStepKey } from '../engine/steps.js'
import type { Fence } from '../engine/store.js'
import type { StoredResponse } from '../engine/types.js'
import type { ReconcilableRow } from '../store/postgres/statements-ops.js'
import { resolveAdminDatabase, type AdminDatabase } from './admin-database.js'
import { logKey, resolveLogger, type LogOption } from '../logger.js'
import type { ReconcileDecisionName } from './reconcile-decisions.js'
import { publishEngineEvent } from '../engine/events.js'

/** What the reconciler's hook is told about a claim it now holds. The request body is not stored. */
export interface ReconcileClaim<Tx = unknown> {
  scope: string
  key: string
  /** The claim's identity: the one in every provider key it derived, and in your own references to it. */
  claimId: string
  fingerprint: string
  /** The last committed step, or null. */
  recoveryPoint: string | null
  /** Committed step results, by step name. */
  steps: Readonly<Record<string, unknown>>
  /** The provider key of each committed step. */
  stepKeys: Readonly<Record<string, string>>
  /** The key step `name` passes on, committed or not: look an uncommitted step up by it. */
  stepKey(name: string): string
  /** Milliseconds since the claim was created. */
  ageMs: number
  /** Milliseconds since its lease was last renewed, before the reconciler took it over. */
  leaseAgeMs: number | null
  /** The claim was taken over or suspended before: an earlier owner may have acted on it. */
  interrupted: boolean
  /** Why an earlier owner could not store its outcome, when that is what suspended it. */
  outcomeError: string | null
  /** The key is past its TTL: if the hook decides nothing, the claim is settled as failed. */
  expired: boolean
  /** Found it done: stores `response` (with `tx`, inside your transaction with the business and outbox rows). */
  complete(response: StoredResponse, options?: { tx?: Tx }): Promise<void>
  /** Found it failed for good: stores `response`, replayed to retries. */
  fail(response: StoredResponse, options?: { tx?: Tx }): Promise<void>
}

/**
 * Looks a claim's outcome up in the outside world and settles it with `complete` or `fail`; or
 * returns without calling either when nothing happened there, which leaves the claim suspended
 * with the same identity, so the next retry calls the provider with the same keys. Never runs
 * the steps (Invariant 12: look the outcome up, never call it blind).
 */
export type ReconcileHook<Tx = unknown> = (claim: ReconcileClaim<Tx>) => Promise<void>

export interface ReconcileOptions<Tx = unknown> {
  /** The engine whose claims to settle: its store, stale threshold, TTL and lease timing. (Default: none, required) */
  engine: Engine<Tx>
  /** Pool and schema of the engine's store, to find the claims. (Default: none, required) */
  database: AdminDatabase
  /** Decides each claim from the outside world. (Default: none, required) */
  hook: ReconcileHook<Tx>
  /** A running claim not renewed for this long is reconciled; at least the stale threshold. (Default: 2 × staleAfterMs) */
  olderThanMs?: number
  /** Claims handled per run, oldest lease first. (Default: 100) */
  limit?: number
  /** Stored for a claim past its TTL that the hook could not settle. (Default: a 502 problem+json, `outcome-unknown`) */
  expiredResponse?: StoredResponse
  /**
   * How long the hook may hold one claim. Past it the reconciler gives the claim up as a handler
   * past `handlerDeadlineMs` does: its lease is no longer renewed, so a retry or the next run
   * takes it over once stale; the run goes on to the next claim (decision `error`), and a late
   * `complete` or `fail` of that hook is refused with `ONCELY_HANDLER_DEADLINE_EXCEEDED`. A
   * `complete` or `fail` called before it (outside a `tx`) whose write lands after it is
   * reported as what it stored. (Default: the engine's `handlerDeadlineMs`)
   */
  hookDeadlineMs?: number
  /** Called with each decision, e.g. `metrics.onReconcile`. (Default: none) */
  onDecision?: (report: ReconcileReport) => void
  /** Where each decision is logged: a pino-style logger or a line function. (Default: `console.warn`) */
  log?: LogOption
}

/** One claim's fate in a run. */
export interface ReconcileReport {
  scope: string
  key: string
  claimId: string
  decision: ReconcileDecisionName
  detail: string
}

/** The default outcome stored for a claim past its TTL whose outcome nobody could confirm. */
export const OUTCOME_UNKNOWN_RESPONSE: StoredResponse = Object.freeze({
  status: 502,
  headers: [['content-type', 'application/problem+json']] as const,
  body: new TextEncoder().encode(
    JSON.stringify({
      type: 'https://oncely.dev/problems/outcome-unknown',
      title: 'Outcome unknown',
      status: 502,
      detail: 'the operation was interrupted and its outcome could not be confirmed before the key expired; check with support before trying again',
    }),
  ),
})

/**
 * Settles the claims nobody settled: owners that died, suspended claims nobody retried. Each is
 * first taken over by the engine's compare-and-swap, as a retry would (so a retry and the
 * reconciler never both act, and a slow live owner is never overtaken), then handed to `hook`.
 *
 * @example
 * ```ts
 * import { reconcileStuckClaims } from 'oncely/ops'
 * const reports = await reconcileStuckClaims({
 *   engine,
 *   database: { pool },
 *   hook: async (claim) => {
 *     const charge = await provider.charge({ lookup: claim.claimId }, claim.stepKey('charge'))
 *     if (charge) await claim.complete({ status: 201, headers: [['content-type', 'application/json']], body: Buffer.from(JSON.stringify(charge)) })
 *   },
 * })
 * ```
 */
export async function reconcileStuckClaims<Tx>(options: ReconcileOptions<Tx>): Promise<ReconcileReport[]> {
  const resolved = resolveReconcileOptions(options)
  const { db, sql } = resolveAdminDatabase(options.database)
  const { rows } = await db.query<ReconcilableRow>({ text: sql.reconcilable, values: [resolved.olderThanMs, resolved.limit] })
  const reports: ReconcileReport[] = []
  for (const row of rows) {
    const report = await reconcileOne(resolved, row)
    reports.push(report)
    resolved.log[report.decision === 'error' ? 'error' : 'info'](
      { scope: report.scope, key: logKey(report.key), claimId: report.claimId, decision: report.decision },
      `reconciler: ${report.detail}`,
    )
    options.onDecision?.(report)
    publishEngineEvent({ event: 'reconciled', scope: report.scope, key: report.key, claimId: report.claimId, decision: report.decision })
  }
  return reports
}

type Resolved<Tx> = ReturnType<typeof resolveReconcileOptions<Tx>>

export function resolveReconcileOptions<Tx>(options: ReconcileOptions<Tx>) {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const { engine, hook } = options
  if (typeof engine !== 'object' || engine === null || typeof engine.begin !== 'function') throw invalid('engine', 'must be an engine from createEngine({ store })', engine)
  if (typeof hook !== 'function') throw invalid('hook', 'must be a function (claim) => Promise<void>', hook)
  resolveAdminDatabase(options.database)
  const { staleAfterMs } = engine.options
  const olderThanMs = positiveInteger('olderThanMs', options.olderThanMs ?? 2 * staleAfterMs)
  // Below the stale threshold the reconciler could take a claim from an owner that still renews it.
  if (olderThanMs < staleAfterMs) throw invalid('olderThanMs', `must be at least the engine's staleAfterMs (${staleAfterMs})`, olderThanMs)
  const hookDeadlineMs = positiveInteger('hookDeadlineMs', options.hookDeadlineMs ?? engine.options.handlerDeadlineMs)
  return Object.freeze({
    engine,
    hook,
    olderThanMs,
    hookDeadlineMs,
    limit: positiveInteger('limit', options.limit ?? 100),
    expiredResponse: options.expiredResponse ?? OUTCOME_UNKNOWN_RESPONSE,
    log: resolveLogger(options.log),
  })
}

async function reconcileOne<Tx>(options: Resolved<Tx>, row: ReconcilableRow): Promise<ReconcileReport> {
  const { store } = options.engine.options
  const seen = await store.read(row.scope, row.key)
  const base = { scope: row.scope, key: row.key, claimId: seen?.claimId ?? row.claim_id }
  if (seen === null || seen.status !== 'in_progress') return { ...base, decision: 'skipped', detail: 'settled or released before the reconciler got to it' }
  // Invariant 4: the engine's own take-over, the compare-and-swap a retry runs, re-checking in
  // the database's clock that the lease is older than olderThanMs. The reconciler must not
  // lengthen the key's life (1 ms instead of the TTL), or a claim nobody retries would never
  // reach its TTL and be settled.
  const claim = await store.takeOver(seen, { fenceToken: randomUUID(), staleAfterMs: options.olderThanMs, ttlMs: 1 })
  if (claim === null) return { ...base, decision: 'skipped', detail: 'someone else took the claim over or settled it first' }
  const fence: Fence = { scope: claim.scope, key: claim.key, fenceToken: claim.fenceToken }
  const expired = seen.expiresInMs <= 0
  const { leaseRenewMs, staleAfterMs } = options.engine.options
  // Invariant 3: while the hook looks the outcome up, the lease is renewed like any owner's, by
  // the engine's own lease; a refusal needs no action here, as the next fenced write fails.
  // The renewal must not lengthen the key's life (1 ms instead of the TTL; see above).
  // Past hookDeadlineMs the hook is abandoned as a handler is (issue 8, path 13): a hook that
  // never returns must not hold a claim, nor the run, for ever.
  let abandoned = false
  let passDeadline = () => {}
  const deadlinePassed = new Promise<'deadline'>((resolve) => (passDeadline = () => resolve('deadline')))
  const lease = new Lease({
    renew: () => store.renewLease(fence, 1),
    renewEveryMs: leaseRenewMs,
    staleAfterMs,
    deadlineMs: options.hookDeadlineMs,
    onRefused: () => undefined,
    onDeadline: () => {
      abandoned = true
      lease.stop()
      passDeadline()
    },
  })
  // The engine's fenced write: retried while the database is away, within the lease, and
  // recognised by read-back when a lost answer hid its landing.
  const writer = new FencedWriter({ store, scope: claim.scope, key: claim.key, lease, onUnavailable: () => lease.stop() })
  const storeOutcome = (status: 'completed' | 'failed', response: StoredResponse) =>
    writer.write(`storing the ${status} outcome`, () => store.complete(fence, { status, response }), (row) => settledBy(fence, row, status))
  const suspend = () =>
    // A suspended claim keeps its id and loses the token; another claim, or none, means the key was freed.
    writer.write('suspending the claim', () => store.suspend(fence), (row) => row !== null && row.claimId === claim.claimId)
  let settled: 'completed' | 'failed' | undefined
  // The hook's own outcome write while it is on its way: one sent before the deadline may still
  // land after it (its fence holds until a retry takes the claim over), and the report must then
  // say what landed, not that the claim was given up.
  let storing: { status: 'completed' | 'failed'; landed: Promise<boolean> } | undefined
  const settle = (status: 'completed' | 'failed') => async (response: StoredResponse, settleOptions: { tx?: Tx } = {}) => {
    if (settled !== undefined || storing !== undefined) throw invalid('complete/fail', `was already called (${settled ?? `${storing!.status}, being stored`})`, status)
    if (abandoned) throw new OncelyError('ONCELY_HANDLER_DEADLINE_EXCEEDED', `the reconciler's hook for key ${JSON.stringify(claim.key)} ran past hookDeadlineMs (${options.hookDeadlineMs} ms); the claim was given up and a retry takes it over`)
    const { tx } = settleOptions
    // In the caller's transaction: one attempt, the caller owns its retries (and its commit,
    // which the run cannot wait for).
    if (tx !== undefined) {
      if (!(await store.complete(fence, { status, response, tx }))) throw new LostClaim()
      settled = status
      return
    }
    const attempt = { status, landed: storeOutcome(status, response) }
    storing = attempt
    let landed = false
    try {
      landed = await attempt.landed
    } finally {
      // A write that failed stored nothing: the hook may call again (a transient error it retries).
      if (!landed) storing = undefined
    }
    if (!landed) throw new LostClaim()
    settled = status
  }
  const gaveUp = { ...base, decision: 'error' as const, detail: `the hook ran past hookDeadlineMs (${options.hookDeadlineMs} ms): the claim was given up, and a retry or the next run takes it over once stale` }
  const stored = (status: 'completed' | 'failed') => ({ ...base, decision: status, detail: `${status}: the hook found the outcome and stored it` })
  /** Past the deadline: the outcome an already sent write stored once it has landed, else the give-up. */
  const afterDeadline = async () => {
    const pending = storing
    return pending !== undefined && (await pending.landed.catch(() => false)) ? stored(pending.status) : gaveUp
  }
  const stepKey = (step: string) => deriveStepKey({ scope: claim.scope, key: claim.key, claimId: claim.claimId, step })
  try {
    const hookRun = (async () => options.hook({
      ...base,
      fingerprint: seen.fingerprint,
      recoveryPoint: claim.recoveryPoint,
      steps: claim.stepResults,
      stepKeys: Object.fromEntries(Object.keys(claim.stepResults).map((step) => [step, stepKey(step)])),
      stepKey,
      ageMs: seen.ageMs,
      leaseAgeMs: seen.leaseAgeMs,
      interrupted: seen.interrupted,
      outcomeError: seen.outcomeError,
      expired,
      complete: settle('completed'),
      fail: settle('failed'),
    }))()
    // The abandoned hook may still end, or throw, after the run has gone on.
    hookRun.catch(() => undefined)
    if ((await Promise.race([hookRun, deadlinePassed])) === 'deadline' || (abandoned && settled === undefined)) return afterDeadline()
    if (settled !== undefined) return stored(settled)
    if (expired) {
      if (!(await storeOutcome('failed', options.expiredResponse))) throw new LostClaim()
      return { ...base, decision: 'expired', detail: `nothing found and the key is past its TTL: settled as failed (${options.expiredResponse.status})` }
    }
    if (!(await suspend())) throw new LostClaim()
    return { ...base, decision: 'unresolved', detail: 'nothing found: left suspended with the same identity, so a retry resumes with the same provider keys' }
  } catch (error) {
    if (error instanceof LostClaim) return { ...base, decision: 'skipped', detail: 'a retry took the claim over while the hook ran; it settles it' }
    if (abandoned && settled === undefined) return afterDeadline()
    // Invariant 7: an unknown outcome is kept resumable, never forgotten.
    if (settled === undefined) await suspend().catch(() => false)
    return { ...base, decision: 'error', detail: `the hook failed, claim left suspended: ${error instanceof Error ? error.message : String(error)}` }
  } finally {
    lease.stop()
  }
}

/** The fence failed: someone else holds the claim now. */
class LostClaim extends Error {}
