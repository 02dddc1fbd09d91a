import type { ClaimState } from '../engine/types.js'
import type { PoolLike } from '../store/postgres/executor.js'
import { quoteSchema } from '../store/postgres/schema-name.js'
import { buildStatements, type TakeOverRow } from '../store/postgres/statements.js'
import type { ReconcilableRow } from '../store/postgres/statements-ops.js'

/**
 * Takes a claim over for the reconciler by the engine's own take-over statement (Invariant 4):
 * the same compare-and-swap a retry runs, so of a retry and the reconciler exactly one wins, and
 * `olderThanMs` (never below the stale threshold) is re-checked in the database's clock, so an
 * owner that renewed meanwhile keeps its claim. Resolves to the new holder's state, or null.
 */
export async function takeOverForReconcile(pool: PoolLike, schema: string, seen: ReconcilableRow, olderThanMs: number): Promise<ClaimState | null> {
  const { takeOver } = buildStatements(quoteSchema(schema), undefined)
  const { rows } = await pool.query<TakeOverRow>({ text: takeOver.text, values: [seen.user_id, seen.key, seen.claim_id, seen.lock_token, seen.request_hash, olderThanMs] })
  const won = rows[0]
  if (!won) return null
  return { scope: seen.user_id, key: seen.key, claimId: seen.claim_id, fenceToken: won.lock_token, recoveryPoint: won.recovery_point, phases: won.phase_data }
}
