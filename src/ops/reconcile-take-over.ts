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
export async function takeOverForReconcile<Tx>(
  store: IdempotencyStore<Tx>,
  seen: ReconcilableRow,
  timing: { olderThanMs: number; ttlMs: number },
): Promise<ClaimState | null> {
  const snapshot = await store.read(seen.user_id, seen.key)
  // The row changed since the reconciler listed it: someone else acted first.
  if (snapshot === null || snapshot.status !== 'in_progress' || snapshot.claimId !== seen.claim_id || snapshot.fenceToken !== seen.lock_token) return null
  return store.takeOver(snapshot, { fenceToken: randomUUID(), staleAfterMs: timing.olderThanMs, ttlMs: timing.ttlMs })
}
