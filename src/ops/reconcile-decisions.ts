/** The outcomes a guarded request can come to; the adapters report one per request. */
export const REQUEST_OUTCOMES = ['created', 'replayed', 'conflict', 'mismatch', 'invalid', 'failed', 'unkeyed'] as const
export type RequestOutcome = (typeof REQUEST_OUTCOMES)[number]

/**
 * How the reconciler handled a claim: `completed` or `failed` (the hook found the outcome),
 * `unresolved` (nothing found: left suspended), `expired` (nothing found past the TTL: settled
 * failed), `skipped` (someone else acted first), `error` (the hook failed: left suspended).
 */
export const RECONCILE_DECISIONS = ['completed', 'failed', 'unresolved', 'expired', 'skipped', 'error'] as const
export type ReconcileDecisionName = (typeof RECONCILE_DECISIONS)[number]
