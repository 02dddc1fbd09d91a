import { randomUUID } from 'node:crypto'
import { backoffCeilingMs } from '../backoff.js'
import { OncelyError } from '../errors.js'
import { decide, type KeyState } from './decide.js'
import { storedFingerprint } from './fingerprint.js'
import type { ResolvedEngineOptions } from './options.js'
import { retryTransient } from './retry.js'
import type { ClaimRequest, Fence } from './store.js'
import type { ClaimKind, ClaimSnapshot, ClaimState, IdempotencyRequest, StoredResponse } from './types.js'
import { openSteps, openResponse } from './encrypted-store.js'
import { isSealedBytes, isSealedText } from './encryption-keys.js'

/** What `begin` does with a request once its key is valid. */
export type ClaimOutcome =
  | { kind: 'owned'; claim: ClaimState; how: ClaimKind }
  | { kind: 'replay'; response: StoredResponse }
  /** `claimId`: the claim in flight, which a duplicate that waits for it watches (issue 23). */
  | { kind: 'conflict'; retryAfterSeconds: number; claimId: string }
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
  const retrying = <T>(what: string | (() => string), attempt: () => Promise<T>, onTransient?: () => void) =>
    retryTransient(what, (error) => store.isTransientError(error), () => deadline, attempt, onTransient)
  // Only the current rule's part is stored; the request's whole value is what `decide` compares.
  const fingerprint = storedFingerprint(request.fingerprint)
  const claimId = randomUUID()
  const fenceToken = randomUUID()
  let tried: ClaimKind = 'new'
  // A claim attempt given up on may land later: its answer lost, or its statement reaching the
  // database after this begin stopped waiting (issue 22). While this begin still runs, its next
  // attempt recognises the row as its own. Once it has ended without owning the key, nobody holds
  // this token, so nobody can have acted on a claim made with it (Invariant 11): it is let go in
  // the background (`letGoOrphan`), so a request answered 503 leaves no claim nobody owns.
  let endedWithoutKey = false
  let unsure = false
  // Only a take-over can have landed on a claim someone may have acted on, which must be kept
  // (suspended), never deleted; a claim or a reclaim that landed made a fresh claim, to delete.
  let takeOverUnsure = false
  const fence = { scope: request.scope, key: request.key, fenceToken }
  const onLateInsert = () => {
    unsure = true
    if (endedWithoutKey) void store.release(fence).catch(() => undefined)
  }
  // What the claim statement needs, built once for every round, field by field: a spread of the
  // request (whose shape differs by caller) was the costliest line of a replay's own profile. The
  // earlier rule's fingerprint goes along only when the caller gave one, as it did in the spread.
  const claimRequest: ClaimRequest & Pick<IdempotencyRequest, 'earlierFingerprint'> = { scope: request.scope, key: request.key, fingerprint, ttlMs, staleAfterMs, claimId, fenceToken, onLateInsert }
  if (request.earlierFingerprint !== undefined) claimRequest.earlierFingerprint = request.earlierFingerprint
  const leftUnsure = () => {
    endedWithoutKey = true
    if (unsure) letGoOrphan(fence, options, takeOverUnsure)
  }
  try {
    const outcome = await claimRounds()
    // Owned: a late report of an earlier attempt's insert is this very claim, made with the same
    // token, which the execution now holds; releasing it would let the key run twice.
    if (outcome.kind !== 'owned') leftUnsure()
    return outcome
  } catch (error) {
    leftUnsure()
    throw error
  }

  async function claimRounds(): Promise<ClaimOutcome> {
    const ours = (snapshot: ClaimSnapshot | null): ClaimOutcome | undefined =>
      snapshot?.status === 'in_progress' && snapshot.fenceToken === fenceToken ? { kind: 'owned', claim: heldClaim(snapshot, fenceToken), how: tried } : undefined

    for (let round = 0; round < ROUNDS; round++) {
      const attempt = await retrying(
        () => `claim of key ${JSON.stringify(request.key)}`,
        () => store.claim(claimRequest),
        () => (unsure = true),
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
          // Issue 23: a sealed response reaching here was never opened (encryption is off):
          // a clear error, never its ciphertext replayed.
          if (isSealedBytes(decision.response.body)) openResponse(undefined, snapshot, decision.response)
          return decision
        case 'mismatch':
          return decision
        case 'conflict':
          return { kind: 'conflict', retryAfterSeconds: Math.ceil(decision.retryAfterMs / 1000), claimId: snapshot.claimId }
        case 'take-over': {
          // Issue 23: step results still sealed here were never opened (encryption is off):
          // refused before the take-over, never handed to the steps as their results.
          if (Object.values(snapshot.stepResults).some(isSealedText)) openSteps(undefined, snapshot, snapshot.stepResults)
          tried = 'take-over'
          let ambiguous = false
          const taken = await retrying(
            `take-over of key ${JSON.stringify(request.key)}`,
            () => store.takeOver(snapshot, { fenceToken, staleAfterMs, ttlMs }),
            () => (ambiguous = unsure = takeOverUnsure = true),
          )
          if (taken) return { kind: 'owned', claim: taken, how: 'take-over' }
          const recognised = ambiguous ? ours(await retrying('read-back', () => store.read(request.scope, request.key))) : undefined
          // Invariant 4: another retry took the same stale claim; it runs now, this one waits.
          return recognised ?? { kind: 'conflict', retryAfterSeconds: options.conflictRetryAfterSeconds, claimId: snapshot.claimId }
        }
        case 'reclaim-expired': {
          tried = 'reclaimed-expired'
          let ambiguous = false
          const fresh = await retrying(
            `reclaim of key ${JSON.stringify(request.key)}`,
            () => store.reclaimExpired(snapshot, { fingerprint, ttlMs, staleAfterMs, claimId, fenceToken }),
            () => (ambiguous = unsure = true),
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

/**
 * Lets go of a claim this begin may have made but never handed to anyone: deleted when nobody
 * took it over, else suspended (a late take-over), so the next retry takes it at once. In the
 * background, with backoff capped at `leaseRenewMs`, until the first success or for
 * `staleAfterMs`, the time such a claim would otherwise answer 409; its timers never keep the
 * process alive. A statement landing later still is not caught: its claim goes stale and is
 * taken over, as before.
 */
function letGoOrphan<Tx>(fence: Fence, options: ResolvedEngineOptions<Tx>, mayBeTakenOver: boolean): void {
  const { store } = options
  const until = performance.now() + options.staleAfterMs
  const attempt = async (tries: number): Promise<void> => {
    try {
      // Invariant 11: `release` deletes only a claim never taken over; `suspend` keeps the identity.
      // Suspending only after a take-over: a fresh claim landing between the two statements would
      // otherwise be suspended, and its next retry marked as if something may have run.
      if ((await store.release(fence)) || (mayBeTakenOver && (await store.suspend(fence)))) return
    } catch {
      // The database is still away: the next try may find it.
    }
    const delay = backoffCeilingMs({ baseMs: ORPHAN_FIRST_DELAY_MS, maxMs: options.leaseRenewMs }, tries)
    if (performance.now() + delay >= until) return
    setTimeout(() => void attempt(tries + 1), delay).unref()
  }
  void attempt(0)
}

const ORPHAN_FIRST_DELAY_MS = 50

function heldClaim(snapshot: ClaimSnapshot, fenceToken: string): ClaimState {
  return {
    scope: snapshot.scope,
    key: snapshot.key,
    claimId: snapshot.claimId,
    fenceToken,
    recoveryPoint: snapshot.recoveryPoint,
    stepResults: snapshot.stepResults,
    startedSteps: snapshot.startedSteps,
    interrupted: snapshot.interrupted,
  }
}
