import { describe, expect, it } from 'vitest'
import { decide, type ClaimSnapshot } from '../../src/index.js'

// The decision tree alone, no SQL: every branch judged from a snapshot.
const timing = { staleAfterMs: 90_000, leaseRenewMs: 30_000, conflictRetryAfterMs: 1000 }
const response = { status: 201, headers: [['content-type', 'application/json']] as [string, string][], body: Buffer.from('{}') }

function snapshot(overrides: Partial<ClaimSnapshot> = {}): ClaimSnapshot {
  return {
    scope: 'u1',
    key: 'k',
    status: 'in_progress',
    fingerprint: 'fp',
    claimId: 'claim-1',
    fenceToken: 'token-1',
    recoveryPoint: null,
    stepResults: {},
    startedSteps: [],
    response: null,
    interrupted: false,
    outcomeError: null,
    ageMs: 1000,
    leaseAgeMs: 1000,
    expiresInMs: 3_600_000,
    ...overrides,
  }
}

const completed = (overrides: Partial<ClaimSnapshot> = {}) => snapshot({ status: 'completed', response, leaseAgeMs: null, ...overrides })

describe('decide', () => {
  it('replays a completed or failed key with the same fingerprint', () => {
    expect(decide(completed(), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'replay', response })
    expect(decide(completed({ status: 'failed' }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'replay', response })
  })

  it('answers mismatch before replay, conflict and take-over (Invariant 5)', () => {
    expect(decide(completed(), { fingerprint: 'other' }, timing)).toEqual({ kind: 'mismatch', state: 'completed' })
    expect(decide(completed({ status: 'failed' }), { fingerprint: 'other' }, timing)).toEqual({ kind: 'mismatch', state: 'failed' })
    expect(decide(snapshot(), { fingerprint: 'other' }, timing)).toEqual({ kind: 'mismatch', state: 'running' })
    expect(decide(snapshot({ leaseAgeMs: 100_000 }), { fingerprint: 'other' }, timing)).toEqual({ kind: 'mismatch', state: 'running' })
    expect(decide(snapshot({ fenceToken: null }), { fingerprint: 'other' }, timing)).toEqual({ kind: 'mismatch', state: 'suspended' })
  })

  it('reclaims a settled key past its TTL, whatever its fingerprint (an expired key is a new request)', () => {
    expect(decide(completed({ expiresInMs: 0 }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'reclaim-expired' })
    expect(decide(completed({ expiresInMs: -5 }), { fingerprint: 'other' }, timing)).toEqual({ kind: 'reclaim-expired' })
  })

  it('never reclaims a running claim past its TTL: it is taken over with its identity, or is a conflict (path 2)', () => {
    expect(decide(snapshot({ expiresInMs: -1000 }), { fingerprint: 'fp' }, timing).kind).toBe('conflict')
    expect(decide(snapshot({ expiresInMs: -1000, leaseAgeMs: 95_000 }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'take-over' })
    expect(decide(snapshot({ expiresInMs: -1000 }), { fingerprint: 'other' }, timing)).toEqual({ kind: 'mismatch', state: 'running' })
  })

  it('takes over a stale claim and a suspended one (Invariant 4)', () => {
    expect(decide(snapshot({ leaseAgeMs: 90_000 }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'take-over' })
    expect(decide(snapshot({ fenceToken: null }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'take-over' })
  })

  it('ages a cached snapshot by the time elapsed since it was read', () => {
    expect(decide(snapshot({ leaseAgeMs: 80_000 }), { fingerprint: 'fp' }, timing, 10_000)).toEqual({ kind: 'take-over' })
    expect(decide(completed({ expiresInMs: 5000 }), { fingerprint: 'fp' }, timing, 5000)).toEqual({ kind: 'reclaim-expired' })
  })

  it('gives an honest Retry-After: about a second while the owner renews, the time to stale once it missed a renewal', () => {
    expect(decide(snapshot({ leaseAgeMs: 29_000 }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'conflict', retryAfterMs: 1000 })
    expect(decide(snapshot({ leaseAgeMs: 44_000 }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'conflict', retryAfterMs: 1000 })
    // Exactly one and a half periods is still on schedule: the allowance includes its own end.
    expect(decide(snapshot({ leaseAgeMs: 45_000 }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'conflict', retryAfterMs: 1000 })
    expect(decide(snapshot({ leaseAgeMs: 50_000 }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'conflict', retryAfterMs: 40_000 })
    expect(decide(snapshot({ leaseAgeMs: 89_500 }), { fingerprint: 'fp' }, timing)).toEqual({ kind: 'conflict', retryAfterMs: 1000 })
  })

  it('refuses a settled key without a stored response rather than guess', () => {
    expect(() => decide(completed({ response: null }), { fingerprint: 'fp' }, timing)).toThrow(/no stored response/)
  })
})

describe('the earlier rules of a fingerprint (issue 21)', () => {
  const v2 = `v2:${'a'.repeat(64)}`
  const v1 = 'b'.repeat(64)
  it('are asked for only when the stored fingerprint is not matched by the current rule, and then decide', () => {
    let asked = 0
    const request = { fingerprint: v2, earlierFingerprint: () => (asked++, `${v2};v1:${v1}`) }
    expect([decide(completed({ fingerprint: v2 }), request, timing).kind, asked]).toEqual(['replay', 0])
    expect([decide(completed({ fingerprint: v1 }), request, timing).kind, asked]).toEqual(['replay', 1])
    expect([decide(completed({ fingerprint: 'c'.repeat(64) }), request, timing).kind, asked]).toEqual(['mismatch', 2])
    expect(decide(completed({ fingerprint: v1 }), { fingerprint: v2 }, timing).kind).toBe('mismatch')
  })
})
