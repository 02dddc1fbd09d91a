import { OncelyError } from '../errors.js'
import { DEFAULT_STALE_AFTER_MS } from '../engine/options.js'
import { positiveInteger } from '../option-validation.js'
import type { RunningClaimsRow, StatsRow } from '../store/postgres/statements-ops.js'
import { resolveAdminDatabase, toNumber, type AdminDatabase } from './admin-database.js'

/** What `oncely stats` prints. */
export interface KeyStats {
  /** Keys by state; `stuck` counts suspended claims and claims past the stale threshold. */
  counts: { inProgress: number; held: number; suspended: number; stuck: number; completed: number; failed: number }
  /** The oldest running claim: its age since creation and since its last lease; null when none runs. */
  oldestRunning: { createdAt: string; ageMs: number; leaseAgeMs: number } | null
  /** The key table with its indexes and TOAST, in bytes. */
  tableBytes: number
  /** Keys past their TTL the sweeper has not deleted yet, and how long ago the oldest expired. */
  sweeper: { expiredUnswept: number; lagMs: number }
}

/**
 * Counts keys by state, finds the oldest running claim, the table's size and the sweeper's lag,
 * in one statement.
 *
 * @example
 * ```ts
 * import { keyStats } from 'oncely/ops'
 * const stats = await keyStats({ pool }, { staleAfterMs: 30_000 })
 * if (stats.sweeper.lagMs > 3_600_000) console.warn('the sweeper is not running')
 * ```
 */
export async function keyStats(target: AdminDatabase, options: { staleAfterMs?: number } = {}): Promise<KeyStats> {
  const { db, sql, tableName } = resolveAdminDatabase(target)
  const staleAfterMs = positiveInteger('staleAfterMs', options.staleAfterMs ?? DEFAULT_STALE_AFTER_MS)
  const { rows } = await db.query<StatsRow>({ text: sql.stats, values: [staleAfterMs, tableName] })
  const row = rows[0]
  if (!row) throw new OncelyError('ONCELY_STORE_UNEXPECTED', 'the stats statement returned no row')
  return {
    counts: { inProgress: row.in_progress, held: row.held, suspended: row.suspended, stuck: row.stuck, completed: row.completed, failed: row.failed },
    oldestRunning:
      row.oldest_running_created_at === null
        ? null
        : { createdAt: row.oldest_running_created_at, ageMs: Number(row.oldest_running_age_ms), leaseAgeMs: Number(row.oldest_running_lease_age_ms) },
    tableBytes: Number(row.table_bytes),
    sweeper: { expiredUnswept: row.expired_unswept, lagMs: toNumber(row.oldest_expired_ms) ?? 0 },
  }
}

/** Running claims for the metrics' gauges. */
export interface RunningClaims {
  held: number
  suspended: number
  /** Running claims whose lease is older than the stale threshold: their owner stopped. */
  staleByLease: number
  /** Running claims created longer ago than the stale threshold: a hung handler that renews shows here. */
  staleByCreation: number
  oldestLeaseAgeMs: number
  oldestAgeMs: number
}

/** One statement over the running claims (the partial index on `in_progress` rows). */
export async function countRunningClaims(target: AdminDatabase, staleAfterMs: number): Promise<RunningClaims> {
  const { db, sql } = resolveAdminDatabase(target)
  const { rows } = await db.query<RunningClaimsRow>({ text: sql.runningClaims, values: [staleAfterMs] })
  const row = rows[0]
  return {
    held: row?.held ?? 0,
    suspended: row?.suspended ?? 0,
    staleByLease: row?.stale_by_lease ?? 0,
    staleByCreation: row?.stale_by_creation ?? 0,
    oldestLeaseAgeMs: toNumber(row?.oldest_lease_age_ms ?? null) ?? 0,
    oldestAgeMs: toNumber(row?.oldest_age_ms ?? null) ?? 0,
  }
}
