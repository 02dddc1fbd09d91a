import { randomUUID } from 'node:crypto'
import { OncelyError } from '../errors.js'
import { decide, type KeyState } from './decide.js'
import { storedFingerprint } from './fingerprint.js'
import type { ResolvedEngineOptions } from './options.js'
import { retryTransient } from './retry.js'
import type { ClaimKind, ClaimSnapshot, ClaimState, IdempotencyRequest, StoredResponse } from './types.js'

/** What `begin` does with a request once its key is valid. */
export type ClaimOutcome =
  | { kind: 'owned'; claim: ClaimState; how: ClaimKind }
  | { kind: 'replay'; response: StoredResponse }
  | { kind: 'conflict'; retryAfterSeconds: number }
  | { kind: 'mismatch'; state: KeyState }

const ROUNDS = 3

/**
 * Invariant 1 and 4, with the decisions in `decide`: one claim statement; the row it reports is
 * judged; a take-over or a reclaim is one more statement. Transient errors are retried within
 * `claimRetryMs`; the claim's identity and token are minted here, so a write whose answer was
 * lost is recognised as ours when the row is read again (issue 8, path 16).
 */
export async function claimKey<Tx>(request: IdempotencyRequest, options: ResolvedEngineOptions<Tx>): Promise<ClaimOutcome> {
  const { store, ttlMs, staleAfterMs } = options
  const deadline = performance.now() + options.claimRetryMs
  const retrying = <T>(what: string, attempt: () => Promise<T>, onTransient?: () => void) =>
    retryTransient(what, (error) => store.isTransientError(error), () => deadline, attempt, onTransient)
  // Only the current rule's part is stored; the request's whole value is what `decide` compares.
  const fingerprint = storedFingerprint(request.fingerprint)
  const claimId = randomUUID()
  const fenceToken = randomUUID()
  let tried: ClaimKind = 'new'
  // A claim attempt given up on may land later. While this begin still runs, its next attempt
  // recognises the row as its own; once it has ended without owning it, the claim is released
  // (nobody can have acted on it), so a request answered 503 leaves nothing behind.
  let ended = false
  let landedLate = false
  const releaseOrphan = () => void store.release({ scope: request.scope, key: request.key, fenceToken }).catch(() => undefined)
  const onLateInsert = () => {
    landedLate = true
    if (ended) releaseOrphan()
  }
  try {
    const outcome = await claimRounds()
    ended = true
    if (outcome.kind !== 'owned' && landedLate) releaseOrphan()
    return outcome
  } catch (error) {
    ended = true
    if (landedLate) releaseOrphan()
    throw error
  }

  async function claimRounds(): Promise<ClaimOutcome> {
    const ours = (snapshot: ClaimSnapshot | null): ClaimOutcome | undefined =>
      snapshot?.status === 'in_progress' && snapshot.fenceToken === fenceToken ? { kind: 'owned', claim: heldClaim(snapshot, fenceToken), how: tried } : undefined

    for (let round = 0; round < ROUNDS; round++) {
      const attempt = await retrying(`claim of key ${JSON.stringify(request.key)}`, () =>
        store.claim({ ...request, fingerprint, ttlMs, claimId, fenceToken, onLateInsert }),
      )
      if (attempt.kind === 'inserted') return { kind: 'owned', claim: attempt.claim, how: 'new' }
      const { snapshot } = attempt
      const mine = ours(snapshot)
      if (mine) return mine
      const decision = decide(snapshot, request, {
        staleAfterMs,
        leaseRenewMs: options.leaseRenewMs,
        conflictRetryAfterMs: options.conflictRetryAfterSeconds * 1000,
      })
      switch (decision.kind) {
        case 'replay':
        case 'mismatch':
          return decision
        case 'conflict':
          return { kind: 'conflict', retryAfterSeconds: Math.ceil(decision.retryAfterMs / 1000) }
        case 'take-over': {
          tried = 'take-over'
          let ambiguous = false
          const taken = await retrying(
            `take-over of key ${JSON.stringify(request.key)}`,
            () => store.takeOver(snapshot, { fenceToken, staleAfterMs, ttlMs }),
            () => (ambiguous = true),
          )
          if (taken) return { kind: 'owned', claim: taken, how: 'take-over' }
          const recognised = ambiguous ? ours(await retrying('read-back', () => store.read(request.scope, request.key))) : undefined
          // Invariant 4: another retry took the same stale claim; it runs now, this one waits.
          return recognised ?? { kind: 'conflict', retryAfterSeconds: options.conflictRetryAfterSeconds }
        }
        case 'reclaim-expired': {
          tried = 'reclaimed-expired'
          let ambiguous = false
          const fresh = await retrying(
            `reclaim of key ${JSON.stringify(request.key)}`,
            () => store.reclaimExpired(snapshot, { fingerprint, ttlMs, claimId, fenceToken }),
            () => (ambiguous = true),
          )
          if (fresh) return { kind: 'owned', claim: fresh, how: 'reclaimed-expired' }
          const recognised = ambiguous ? ours(await retrying('read-back', () => store.read(request.scope, request.key))) : undefined
          if (recognised) return recognised
          // Someone else reclaimed or swept it meanwhile: claim again and judge what is there now.
          tried = 'new'
          break
        }
      }
    }
    throw new OncelyError('ONCELY_STORE_UNEXPECTED', `the key ${JSON.stringify(request.key)} changed under ${ROUNDS} claims in a row`)
  }
}

function heldClaim(snapshot: ClaimSnapshot, fenceToken: string): ClaimState {
  return {
    scope: snapshot.scope,
    key: snapshot.key,
    claimId: snapshot.claimId,
    fenceToken,
    recoveryPoint: snapshot.recoveryPoint,
    phases: snapshot.phases,
    startedSteps: snapshot.startedSteps,
    interrupted: snapshot.interrupted,
  }
}
