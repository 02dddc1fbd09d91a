/** Turns the store's rows into the engine's snapshot and claim state. */
import type { ClaimSnapshot, ClaimState } from '../../engine/types.js'
import type { HeldRow, KeyRow } from './statements.js'

export function snapshotOf(scope: string, key: string, row: KeyRow): ClaimSnapshot {
  const response =
    row.response_status === null || row.response_body === null
      ? null
      : { status: row.response_status, headers: row.response_headers ?? [], body: row.response_body }
  return {
    scope,
    key,
    status: row.status,
    fingerprint: row.fingerprint,
    claimId: row.claim_id,
    fenceToken: row.fence_token,
    recoveryPoint: row.recovery_point,
    stepResults: row.step_results,
    startedSteps: row.started_steps,
    response,
    interrupted: row.interrupted,
    outcomeError: row.outcome_error,
    staleAfterMs: row.stale_after_ms,
    ageMs: row.age_ms,
    leaseAgeMs: row.lease_age_ms,
    expiresInMs: row.expires_in_ms,
  }
}

/** A key's row as the claim statement returns it, one JSON text (`ClaimRow.snapshot`), as a `KeyRow`. */
export function keyRowFromJson(text: string): KeyRow {
  const row = JSON.parse(text) as Omit<KeyRow, 'response_body'> & { response_body: string | null }
  return { ...row, response_body: row.response_body === null ? null : Buffer.from(row.response_body, 'base64') }
}

/** The state of a claim the claim statement has just inserted: a new row holds nothing yet. */
export function newClaimOf(scope: string, key: string, claimId: string, fenceToken: string): ClaimState {
  return { scope, key, claimId, fenceToken, recoveryPoint: null, stepResults: {}, startedSteps: [], interrupted: false }
}

export function claimOf(scope: string, key: string, row: HeldRow): ClaimState {
  return {
    scope,
    key,
    claimId: row.claim_id,
    fenceToken: row.fence_token,
    recoveryPoint: row.recovery_point,
    stepResults: row.step_results,
    startedSteps: row.started_steps,
    interrupted: row.interrupted,
  }
}
