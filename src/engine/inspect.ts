import { keyStateOf, type KeyState } from './decide.js'
import { parseIdempotencyKey } from './key.js'
import type { IdempotencyStore } from './store.js'
import type { StoredResponse } from './types.js'

/** Which operation `engine.inspect` looks up: a scope and a key as a client sent it. */
export interface InspectInput {
  scope: string | number
  /** The `Idempotency-Key` value, quoted or not, as `begin` takes it. */
  key: string
}

/**
 * One operation as the store holds it, for support tools: read-only, never a decision. Times
 * are in the database's clock at the read.
 */
export interface OperationRecord {
  scope: string
  /** The key as stored (unquoted). */
  key: string
  /** `running` (a claim is held), `suspended` (waiting for a retry to resume it), `completed`, `failed`. */
  state: KeyState
  /** A `running` claim whose lease is older than `staleAfterMs`: the next retry takes it over. */
  stale: boolean
  /** A `completed` or `failed` key past its TTL: the next request with it is a new operation. */
  expired: boolean
  /** The claim's identity, part of every step key. */
  claimId: string
  /** The stored fingerprint of the request that made the key. */
  fingerprint: string
  /** The last committed step, or null before any. */
  recoveryPoint: string | null
  /** Committed step results, by step name. */
  steps: Readonly<Record<string, unknown>>
  /** At-most-once steps recorded as started. */
  startedSteps: readonly string[]
  /**
   * The stored response of a `completed` or `failed` key, exactly as it is replayed (a
   * `…/result-unavailable` problem when the response could not be stored); null otherwise.
   */
  response: StoredResponse | null
  /** Taken over or suspended at some time: an earlier owner may have acted on it. */
  interrupted: boolean
  /** Why the outcome could not be stored, for a claim suspended by that failure. */
  outcomeError: string | null
  ageMs: number
  leaseAgeMs: number | null
  /** Milliseconds until the key expires; zero or less once it has. */
  expiresInMs: number
}

/**
 * The operation of `input`, or null when the store holds none (never made, released, swept, or a
 * key no request could send). One read through the store port, never a cache's guess.
 */
export async function inspectOperation<Tx>(store: IdempotencyStore<Tx>, scope: string, key: string, staleAfterMs: number): Promise<OperationRecord | null> {
  const parsed = parseIdempotencyKey(key)
  if (!parsed.ok) return null
  const snapshot = await store.read(scope, parsed.key)
  if (snapshot === null) return null
  const state = keyStateOf(snapshot)
  return {
    scope: snapshot.scope,
    key: snapshot.key,
    state,
    stale: state === 'running' && (snapshot.leaseAgeMs ?? 0) >= staleAfterMs,
    expired: state !== 'running' && state !== 'suspended' && snapshot.expiresInMs <= 0,
    claimId: snapshot.claimId,
    fingerprint: snapshot.fingerprint,
    recoveryPoint: snapshot.recoveryPoint,
    steps: snapshot.stepResults,
    startedSteps: snapshot.startedSteps,
    response: snapshot.response,
    interrupted: snapshot.interrupted,
    outcomeError: snapshot.outcomeError,
    ageMs: snapshot.ageMs,
    leaseAgeMs: snapshot.leaseAgeMs,
    expiresInMs: snapshot.expiresInMs,
  }
}
