import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { createEngine, deriveStepKey, type EngineOptions, type IdempotencyStore } from '../../src/index.js'

// The engine's options and the step key, no SQL (issue 13: the mutants these kill survived the
// rest of the suite). Nothing here reaches the store, so a stub with `claim` is enough.
const store = { claim() {} } as unknown as IdempotencyStore
const engineWith = (options: Partial<EngineOptions>) => createEngine({ store, ...options })
const refusal = (options: unknown): string => {
  try {
    createEngine(options as EngineOptions)
  } catch (error) {
    expect((error as { code?: string }).code).toBe('ONCELY_INVALID_OPTION')
    return (error as Error).message
  }
  throw new Error('accepted')
}

describe('createEngine resolves its options once', () => {
  it('the defaults: a day to live, stale after 90 s, renewed every 30 s, Retry-After 1, a 10 min deadline, 2 s of claim retries, waiters reading at 10 ms doubling to 200 ms (1 s while watched); frozen', () => {
    const { options } = engineWith({})
    expect({ ...options, store: undefined }).toEqual({
      store: undefined,
      ttlMs: 86_400_000,
      staleAfterMs: 90_000,
      leaseRenewMs: 30_000,
      conflictRetryAfterSeconds: 1,
      handlerDeadlineMs: 600_000,
      claimRetryMs: 2000,
      waitFirstPollMs: 10,
      waitMaxPollMs: 200,
      waitWatchedPollMs: 1000,
    })
    expect(options.store).toBe(store)
    expect(Object.isFrozen(options)).toBe(true)
  })

  it('the lease is renewed every third of staleAfterMs, rounded down, and at least every millisecond', () => {
    expect(engineWith({ staleAfterMs: 10, ttlMs: 100 }).options.leaseRenewMs).toBe(3)
    expect(engineWith({ staleAfterMs: 2, ttlMs: 100 }).options.leaseRenewMs).toBe(1)
  })

  it('refuses anything but an object, and a store without claim', () => {
    expect(refusal(null)).toMatch(/^option options must be an object/)
    expect(refusal('x')).toMatch(/^option options must be an object/)
    expect(refusal({})).toMatch(/^option store must be an IdempotencyStore/)
    expect(refusal({ store: null })).toMatch(/^option store must be/)
    expect(refusal({ store: {} })).toMatch(/^option store must be/)
  })

  it('every duration is a positive integer, named when it is not', () => {
    for (const name of ['ttlMs', 'staleAfterMs', 'leaseRenewMs', 'conflictRetryAfterSeconds', 'handlerDeadlineMs', 'claimRetryMs', 'waitFirstPollMs', 'waitMaxPollMs', 'waitWatchedPollMs']) {
      expect(refusal({ store, [name]: 0 })).toBe(`option ${name} must be a positive integer; got 0`)
    }
  })

  it('the lease is renewed before it goes stale: leaseRenewMs below staleAfterMs', () => {
    expect(refusal({ store, staleAfterMs: 1000, leaseRenewMs: 1000 })).toBe('option leaseRenewMs must be below staleAfterMs (1000); got 1000')
    expect(engineWith({ staleAfterMs: 1000, leaseRenewMs: 999 }).options.leaseRenewMs).toBe(999)
  })

  it('a key outlives its lease (Invariant 11): ttlMs above staleAfterMs', () => {
    expect(refusal({ store, staleAfterMs: 1000, ttlMs: 1000 })).toBe('option ttlMs must be above staleAfterMs (1000); got 1000')
    expect(engineWith({ staleAfterMs: 1000, ttlMs: 1001 }).options.ttlMs).toBe(1001)
  })

  it('a waiter backs off, never speeds up: waitMaxPollMs at least waitFirstPollMs, and raised to it when not given', () => {
    expect(refusal({ store, waitFirstPollMs: 500, waitMaxPollMs: 100 })).toBe('option waitMaxPollMs must be at least waitFirstPollMs (500); got 100')
    expect(engineWith({ waitFirstPollMs: 500 }).options.waitMaxPollMs).toBe(500)
  })

  it('the handler deadline leaves room for a renewal: handlerDeadlineMs above leaseRenewMs', () => {
    expect(refusal({ store, leaseRenewMs: 500, handlerDeadlineMs: 500 })).toBe('option handlerDeadlineMs must be above leaseRenewMs (500); got 500')
    expect(engineWith({ leaseRenewMs: 500, handlerDeadlineMs: 501 }).options.handlerDeadlineMs).toBe(501)
  })
})

describe('deriveStepKey', () => {
  it('is the SHA-256 of the length-prefixed scope, key, claim id and step: a released derivation never changes', () => {
    const parts = { scope: 'u1', key: 'order-1', claimId: '0b6c1d2e-0000-4000-8000-000000000000', step: 'charge' }
    const expected = createHash('sha256').update('2:u1;7:order-1;36:0b6c1d2e-0000-4000-8000-000000000000;6:charge;').digest('hex')
    expect(deriveStepKey(parts)).toBe(expected)
    // Lengths count bytes, not UTF-16 units.
    const accented = createHash('sha256').update('2:é;1:k;1:c;1:s;').digest('hex')
    expect(deriveStepKey({ scope: 'é', key: 'k', claimId: 'c', step: 's' })).toBe(accented)
  })
})
