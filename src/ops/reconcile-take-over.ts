import { randomUUID } from 'node:crypto'
import type { IdempotencyStore } from '../engine/store.js'
import type { ClaimState } from '../engine/types.js'
import type { ReconcilableRow } from '../store/postgres/statements-ops.js'

/**
 * Takes a claim over for the reconciler by the engine's own take-over statement (Invariant 4):
 * the same compare-and-swap a retry runs, so of a retry and the reconciler exactly one wins, and
 * `olderThanMs` (never below the stale threshold) is re-checked in the database's clock, so an
 * owner that renewed meanwhile keeps its claim. Resolves to the new holder's state, or null.
 */
export async function takeOverForReconcile(store: IdempotencyStore<unknown>, seen: ReconcilableRow, olderThanMs: number, ttlMs: number): Promise<ClaimState | null> {
  const claim = { scope: seen.user_id, key: seen.key, claimId: seen.claim_id, fenceToken: seen.lock_token }
  return store.takeOver(claim, { fenceToken: randomUUID(), staleAfterMs: olderThanMs, ttlMs })
}
