import type { Attempt } from './attempt.js'
import type { World } from './world.js'

/** What the model knows of one (user, key). */
export interface KeyModel {
  readonly scope: string
  readonly key: string
  /** The fingerprint of the claim or record there. */
  fingerprint: string
  /** A row is there (claim or record). */
  exists: boolean
  /** The claim's identity, as its owners saw it. */
  claimId: string | undefined
  /** The handler that holds the claim now and renews it: a live claim. */
  owner: Attempt | undefined
  /** A handler that ended while its claim stayed in progress: it must stop renewing. */
  orphan: Attempt | undefined
  /** A step may have begun under `claimId` and no outcome is stored: the claim must never be deleted or re-identified. */
  acted: boolean
  /** The claim was given up with its lock token cleared: takeable now. */
  suspended: boolean
  /** How much database time has passed for it, by the model's aging. */
  age: 'fresh' | 'stale' | 'expired'
  /** The first answer stored for it in this TTL. */
  settled: { status: number; body: Buffer } | undefined
  /** Provider keys charged before this TTL began, left out of this TTL's count. */
  chargedBefore: Set<string>
}

export interface Model {
  keys: KeyModel[]
  /** Scopes of this run start with it. */
  scopePrefix: string
  /** Counter for the response bodies, so two attempts never answer the same bytes. */
  answers: number
}

/** The model's idea of a violated invariant: the message names it and what was seen. */
export class InvariantViolation extends Error {
  override name = 'InvariantViolation'
}

export function newModel(scopePrefix: string): Model {
  // Two keys of one user, and the first key again under another user (keys are per user).
  const pairs: Array<[string, string]> = [
    ['u1', 'k1'],
    ['u1', 'k2'],
    ['u2', 'k1'],
  ]
  return {
    scopePrefix,
    answers: 0,
    keys: pairs.map(([user, key]) => ({
      scope: `${scopePrefix}${user}`,
      key,
      fingerprint: 'f1',
      exists: false,
      claimId: undefined,
      owner: undefined,
      orphan: undefined,
      acted: false,
      suspended: false,
      age: 'fresh',
      settled: undefined,
      chargedBefore: new Set(),
    })),
  }
}

export function describeKey(key: KeyModel): string {
  return `(${key.scope}, ${key.key})`
}

/**
 * The invariants that hold after every command, read from the database and the provider:
 * at most one charge per (user, key) within one TTL, counted by the provider keys it saw;
 * a claim that may have acted is still there, with its identity, until it is settled.
 */
export async function checkInvariants(model: Model, world: World): Promise<void> {
  for (const key of model.keys) {
    const charged = world.provider.chargedKeys(key.scope, key.key).filter((providerKey) => !key.chargedBefore.has(providerKey))
    if (charged.length > 1) {
      throw new InvariantViolation(`${describeKey(key)} was charged ${charged.length} times within one TTL (provider keys ${charged.map((k) => k.slice(0, 12)).join(', ')})`)
    }
    const row = await world.row(key.scope, key.key)
    if (key.acted && key.settled === undefined) {
      if (!row) throw new InvariantViolation(`${describeKey(key)}: the claim ${key.claimId} may have acted (a step began) and was deleted before it was settled`)
      if (row.claim_id !== key.claimId) {
        throw new InvariantViolation(`${describeKey(key)}: the claim ${key.claimId} may have acted and was re-identified as ${row.claim_id} before it was settled`)
      }
    }
    key.exists = row !== undefined
    if (row?.status === 'in_progress' && row.suspended) key.suspended = true
  }
}
