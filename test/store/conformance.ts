import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Fence, FinalOutcome, IdempotencyStore } from '../../src/engine/store.js'
import type { ClaimSnapshot, ClaimState, StoredResponse } from '../../src/engine/types.js'
import { fingerprintRequest } from '../../src/index.js'
import { latch } from '../helpers/deferred.js'
import { until } from '../helpers/until.js'

/**
 * A store under test: `open` (in `beforeAll`) gives the store and what closes it. The table talks
 * to it through the port alone (`src/engine/store.ts`), so a second store is judged by the same
 * cases, as every adapter is by `test/adapters/conformance.ts`.
 */
export interface StoreSubject<Tx> {
  readonly name: string
  /** Skips the table, for a store whose server this pass has not (Redis runs in one pass only). */
  readonly skip?: boolean
  /**
   * Cases this store is known to fail, by name, each with why: they run as `it.fails`, so the
   * table still shows the fault, and turns red the day it is fixed (then remove the entry).
   */
  readonly knownFailures?: Readonly<Record<string, string>>
  open(): Promise<{ store: IdempotencyStore<Tx>; close(): Promise<void> }>
}

const DAY_MS = 86_400_000
/** Every race runs this wide, on the store's parallel connections (docs/conventions.md, Tests). */
const RACE_WIDTH = 20
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const otherFingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 2000 } })

/** A response whose bytes a text or JSON column would not keep: header order, a repeated header, bytes that are not UTF-8. */
const RESPONSE: StoredResponse = {
  status: 201,
  headers: [
    ['content-type', 'application/json'],
    ['set-cookie', 'b=2'],
    ['set-cookie', 'a=1'],
  ],
  body: Buffer.from([0x7b, 0x22, 0x7a, 0x22, 0x3a, 0x31, 0x2c, 0x22, 0x61, 0x22, 0x3a, 0xff, 0x00, 0x7d]),
}
const completed: FinalOutcome = { status: 'completed', response: RESPONSE }

/** How a completion is sent: on the store's connection, inside a transaction the store opens, or as one flight. */
type CompletionWay = 'alone' | 'in a transaction' | 'in one flight'
const COMPLETION_WAYS: readonly CompletionWay[] = ['alone', 'in a transaction', 'in one flight']

/**
 * Every completion of the table goes through here, the one place that knows the port's
 * completion method and its three ways. `inside` runs after the completion inside the store's transaction (for the
 * `in a transaction` way only): a throw there rolls the completion back.
 */
function complete<Tx>(store: IdempotencyStore<Tx>, fence: Fence, outcome: FinalOutcome, way: CompletionWay = 'alone', inside?: () => void): Promise<boolean> {
  switch (way) {
    case 'alone':
      return store.complete(fence, outcome)
    case 'in a transaction':
      return store.transaction(async (tx) => {
        const done = await store.complete(fence, { ...outcome, tx })
        inside?.()
        return done
      })
    case 'in one flight':
      return store.complete(fence, { ...outcome, statements: [] })
  }
}

const bytesOf = (response: StoredResponse | null | undefined) => (response ? { status: response.status, headers: response.headers.map(([name, value]) => [name, value]), body: Buffer.from(response.body).toString('hex') } : response)

/** The conformance table every store passes. */
export function storeConformance<Tx>(subject: StoreSubject<Tx>): void {
  describe.skipIf(subject.skip === true)(`${subject.name}: the store port's contract`, () => {
    const test = (name: string, body: () => Promise<void>) => (subject.knownFailures?.[name] === undefined ? it : it.fails)(name, body)
    let store: IdempotencyStore<Tx>
    let close: (() => Promise<void>) | undefined
    beforeAll(async () => {
      const opened = await subject.open()
      store = opened.store
      close = () => opened.close()
    })
    afterAll(async () => {
      await close?.()
    })

    /** A scope of the case's own, so cases share the store and never each other's rows. */
    const newScope = () => `conformance-${randomUUID().slice(0, 8)}`
    const request = (scope: string, key: string, overrides: { fingerprint?: string; ttlMs?: number; staleAfterMs?: number } = {}) => ({
      scope,
      key,
      fingerprint,
      ttlMs: DAY_MS,
      claimId: randomUUID(),
      fenceToken: randomUUID(),
      ...overrides,
    })
    /** Claims a free key; `fence` is what its holder writes with. */
    async function claimed(overrides: { ttlMs?: number; staleAfterMs?: number } = {}): Promise<{ claim: ClaimState; fence: Fence }> {
      const asked = request(newScope(), randomUUID(), overrides)
      const attempt = await store.claim(asked)
      if (attempt.kind !== 'inserted') throw new Error('a fresh key was not free')
      return { claim: attempt.claim, fence: { scope: asked.scope, key: asked.key, fenceToken: attempt.claim.fenceToken } }
    }
    const read = async (fence: Pick<Fence, 'scope' | 'key'>) => store.read(fence.scope, fence.key)
    const mustRead = async (fence: Pick<Fence, 'scope' | 'key'>): Promise<ClaimSnapshot> => {
      const snapshot = await read(fence)
      if (snapshot === null) throw new Error(`no row for ${fence.key}`)
      return snapshot
    }
    /** Resolves once the store reports the claim's lease older than `ms`: it has gone stale by that threshold. */
    const leaseOlderThan = (fence: Fence, ms: number) =>
      until(async () => {
        const snapshot = await mustRead(fence)
        return (snapshot.leaseAgeMs ?? snapshot.ageMs) > ms
      }, `a lease older than ${ms} ms`)
    const expired = (fence: Fence) => until(async () => (await mustRead(fence)).expiresInMs <= 0, 'the key to expire')
    const lostFence = (fence: Fence): Fence => ({ ...fence, fenceToken: randomUUID() })

    describe('the claim (Invariant 1)', () => {
      test('a free key is inserted with the identity and token the caller minted, and nothing run yet', async () => {
        const asked = request(newScope(), randomUUID())
        const attempt = await store.claim(asked)
        expect(attempt).toEqual({
          kind: 'inserted',
          claim: { scope: asked.scope, key: asked.key, claimId: asked.claimId, fenceToken: asked.fenceToken, recoveryPoint: null, stepResults: {}, startedSteps: [], interrupted: false },
        })
        expect(await mustRead(asked)).toMatchObject({ status: 'in_progress', fingerprint, claimId: asked.claimId, fenceToken: asked.fenceToken, response: null, interrupted: false, outcomeError: null })
      })

      test('a key already claimed is reported as it is: its claim, its fingerprint, whatever the second claim carries', async () => {
        const { claim, fence } = await claimed()
        const again = await store.claim(request(fence.scope, fence.key, { fingerprint: otherFingerprint }))
        expect(again.kind).toBe('existing')
        if (again.kind !== 'existing') return
        expect(again.snapshot).toMatchObject({ status: 'in_progress', claimId: claim.claimId, fingerprint, response: null })
        // The second claim changed nothing: the stored fingerprint is the first one (Invariant 5).
        expect(await mustRead(fence)).toMatchObject({ claimId: claim.claimId, fenceToken: claim.fenceToken, fingerprint })
      })

      test('keys are per scope: the same key in another scope is another claim', async () => {
        const { fence } = await claimed()
        const other = await store.claim(request(newScope(), fence.key))
        expect(other.kind).toBe('inserted')
        // The other scope's token does not fence this scope's claim.
        if (other.kind === 'inserted') expect(await store.renewLease({ ...fence, fenceToken: other.claim.fenceToken }, DAY_MS)).toBe(false)
      })

      test(`${RACE_WIDTH} claims of one free key at once: exactly one is inserted, every other sees it`, async () => {
        const scope = newScope()
        const key = randomUUID()
        const start = latch(RACE_WIDTH)
        const attempts = await Promise.all(
          Array.from({ length: RACE_WIDTH }, async () => {
            await start.arrive()
            return store.claim(request(scope, key))
          }),
        )
        const inserted = attempts.filter((attempt) => attempt.kind === 'inserted')
        expect(inserted).toHaveLength(1)
        const winner = inserted[0]!.kind === 'inserted' ? inserted[0]!.claim.claimId : ''
        for (const attempt of attempts) if (attempt.kind === 'existing') expect(attempt.snapshot.claimId).toBe(winner)
      })

      test('reading a key nobody claimed is null', async () => {
        expect(await store.read(newScope(), randomUUID())).toBeNull()
      })
    })

    describe('fenced writes (Invariant 3)', () => {
      test('a step commits its result and moves the recovery point; a step that returned nothing stores null', async () => {
        const { fence } = await claimed()
        expect(await store.commitStep(fence, 'quote', { price: 3, currency: 'eur' })).toBe(true)
        expect(await store.commitStep(fence, 'notify', undefined)).toBe(true)
        expect(await mustRead(fence)).toMatchObject({ stepResults: { quote: { price: 3, currency: 'eur' }, notify: null }, recoveryPoint: 'notify' })
      })

      test('results carried by a step commit with it, the step last', async () => {
        const { fence } = await claimed()
        expect(await store.commitStep(fence, 'charge', { id: 'ch_1' }, { stepResults: { quote: { price: 3 } }, recoveryPoint: 'quote' })).toBe(true)
        expect(await mustRead(fence)).toMatchObject({ stepResults: { quote: { price: 3 }, charge: { id: 'ch_1' } }, recoveryPoint: 'charge' })
      })

      test('an at-most-once step is recorded as started, with the results it carries and their recovery point', async () => {
        const { fence } = await claimed()
        expect(await store.markStepStarted(fence, 'charge', { stepResults: { quote: { price: 3 } }, recoveryPoint: 'quote' })).toBe(true)
        expect(await mustRead(fence)).toMatchObject({ startedSteps: ['charge'], stepResults: { quote: { price: 3 } }, recoveryPoint: 'quote' })
        // Nothing carried: the step is recorded, the phases and the recovery point stay as they were.
        expect(await store.markStepStarted(fence, 'email')).toBe(true)
        expect(await mustRead(fence)).toMatchObject({ startedSteps: ['charge', 'email'], stepResults: { quote: { price: 3 } }, recoveryPoint: 'quote' })
      })

      test('every write with another token is refused and changes nothing', async () => {
        const { fence } = await claimed()
        expect(await store.commitStep(fence, 'quote', { price: 3 })).toBe(true)
        const before = await mustRead(fence)
        const lost = lostFence(fence)
        expect(await store.commitStep(lost, 'charge', { id: 'ch_lost' })).toBe(false)
        expect(await store.markStepStarted(lost, 'email')).toBe(false)
        expect(await store.renewLease(lost, DAY_MS)).toBe(false)
        for (const way of COMPLETION_WAYS) expect(await complete(store, lost, completed, way), way).toBe(false)
        expect(await store.suspend(lost, 'refused')).toBe(false)
        expect(await store.release(lost)).toBe(false)
        expect(await mustRead(fence)).toMatchObject({ status: 'in_progress', fenceToken: fence.fenceToken, stepResults: before.stepResults, recoveryPoint: before.recoveryPoint, startedSteps: [], outcomeError: null })
      })

      test('a settled key takes no write, not even with the token that completed it', async () => {
        const { fence } = await claimed()
        expect(await complete(store, fence, completed)).toBe(true)
        expect(await store.commitStep(fence, 'late', { id: 'ch_late' })).toBe(false)
        expect(await store.markStepStarted(fence, 'late')).toBe(false)
        expect(await store.renewLease(fence, DAY_MS)).toBe(false)
        for (const way of COMPLETION_WAYS) expect(await complete(store, fence, { status: 'failed', response: { status: 500, headers: [], body: Buffer.from('late') } }, way), way).toBe(false)
        expect(await store.suspend(fence)).toBe(false)
        expect(await store.release(fence)).toBe(false)
        expect(bytesOf((await mustRead(fence)).response)).toEqual(bytesOf(RESPONSE))
      })
    })

    describe('completion and replay (Invariant 6)', () => {
      for (const way of COMPLETION_WAYS) {
        test(`completed ${way}: the response comes back byte for byte, the completing token stays on the row, and a claim sees it`, async () => {
          const { claim, fence } = await claimed()
          expect(await complete(store, fence, completed, way)).toBe(true)
          const snapshot = await mustRead(fence)
          expect(snapshot).toMatchObject({ status: 'completed', claimId: claim.claimId, fenceToken: fence.fenceToken, fingerprint })
          expect(bytesOf(snapshot.response)).toEqual(bytesOf(RESPONSE))
          const again = await store.claim(request(fence.scope, fence.key))
          expect(again.kind).toBe('existing')
          if (again.kind === 'existing') {
            expect(again.snapshot).toMatchObject({ status: 'completed', claimId: claim.claimId, fingerprint })
            expect(bytesOf(again.snapshot.response)).toEqual(bytesOf(RESPONSE))
          }
        })
      }

      test('a failure stored to be replayed is read back as failed, its response verbatim', async () => {
        const { fence } = await claimed()
        const declined: StoredResponse = { status: 402, headers: [['content-type', 'application/problem+json']], body: Buffer.from('{"type":"card_declined"}') }
        expect(await complete(store, fence, { status: 'failed', response: declined })).toBe(true)
        const snapshot = await mustRead(fence)
        expect(snapshot.status).toBe('failed')
        expect(bytesOf(snapshot.response)).toEqual(bytesOf(declined))
      })

      test('a completion whose transaction rolls back leaves the claim running, and it completes afterwards', async () => {
        const { fence } = await claimed()
        const refused = new Error('the business write failed')
        await expect(
          complete(store, fence, completed, 'in a transaction', () => {
            throw refused
          }),
        ).rejects.toBe(refused)
        expect(await mustRead(fence)).toMatchObject({ status: 'in_progress', fenceToken: fence.fenceToken, response: null })
        expect(await complete(store, fence, completed)).toBe(true)
      })

      test('the first completion wins: a second one is refused and the first response stays', async () => {
        const { fence } = await claimed()
        expect(await complete(store, fence, completed)).toBe(true)
        expect(await complete(store, fence, { status: 'completed', response: { status: 200, headers: [], body: Buffer.from('second') } })).toBe(false)
        expect(bytesOf((await mustRead(fence)).response)).toEqual(bytesOf(RESPONSE))
      })
    })

    describe('the lease (Invariant 11)', () => {
      test('a renewal keeps the lease young and pushes the expiry to at least ttlMs from now', async () => {
        const { fence } = await claimed({ ttlMs: 60_000 })
        await leaseOlderThan(fence, 200)
        expect(await store.renewLease(fence, DAY_MS)).toBe(true)
        const snapshot = await mustRead(fence)
        expect(snapshot.leaseAgeMs ?? Infinity).toBeLessThan(200)
        expect(snapshot.expiresInMs).toBeGreaterThan(DAY_MS - 60_000)
        // A shorter TTL never brings the expiry closer.
        expect(await store.renewLease(fence, 1000)).toBe(true)
        expect((await mustRead(fence)).expiresInMs).toBeGreaterThan(DAY_MS - 60_000)
      })
    })

    describe('take-over (Invariant 4)', () => {
      test('a claim whose lease is younger than the threshold is not taken over', async () => {
        const { fence } = await claimed()
        expect(await store.takeOver(await mustRead(fence), { fenceToken: randomUUID(), staleAfterMs: 60_000, ttlMs: DAY_MS })).toBeNull()
        expect((await mustRead(fence)).fenceToken).toBe(fence.fenceToken)
      })

      test('a stale claim is taken over: same identity and recovery point, a new token, interrupted; the old token is fenced out', async () => {
        const { claim, fence } = await claimed()
        expect(await store.commitStep(fence, 'quote', { price: 3 })).toBe(true)
        await leaseOlderThan(fence, 20)
        const token = randomUUID()
        const taken = await store.takeOver(await mustRead(fence), { fenceToken: token, staleAfterMs: 20, ttlMs: DAY_MS })
        expect(taken).toEqual({ scope: fence.scope, key: fence.key, claimId: claim.claimId, fenceToken: token, recoveryPoint: 'quote', stepResults: { quote: { price: 3 } }, startedSteps: [], interrupted: true })
        expect(await store.commitStep(fence, 'charge', { by: 'old' })).toBe(false)
        expect(await complete(store, fence, completed)).toBe(false)
        expect(await store.commitStep({ ...fence, fenceToken: token }, 'charge', { by: 'taker' })).toBe(true)
        expect(await mustRead(fence)).toMatchObject({ fenceToken: token, interrupted: true, stepResults: { quote: { price: 3 }, charge: { by: 'taker' } } })
      })

      test('a snapshot read before a renewal matches nothing once the lease was renewed', async () => {
        const { fence } = await claimed()
        await leaseOlderThan(fence, 20)
        const seen = await mustRead(fence)
        expect(await store.renewLease(fence, DAY_MS)).toBe(true)
        expect(await store.takeOver(seen, { fenceToken: randomUUID(), staleAfterMs: 20_000, ttlMs: DAY_MS })).toBeNull()
        expect((await mustRead(fence)).fenceToken).toBe(fence.fenceToken)
      })

      test(`${RACE_WIDTH} takers of one stale snapshot at once: exactly one wins`, async () => {
        const { fence } = await claimed()
        await leaseOlderThan(fence, 20)
        const seen = await mustRead(fence)
        const start = latch(RACE_WIDTH)
        const taken = await Promise.all(
          Array.from({ length: RACE_WIDTH }, async () => {
            await start.arrive()
            return store.takeOver(seen, { fenceToken: randomUUID(), staleAfterMs: 20, ttlMs: DAY_MS })
          }),
        )
        const winners = taken.filter((state) => state !== null)
        expect(winners).toHaveLength(1)
        expect((await mustRead(fence)).fenceToken).toBe(winners[0]!.fenceToken)
      })

      test('the threshold a claim was made under holds against a taker that judges by a shorter one (issue 22)', async () => {
        const { fence } = await claimed({ staleAfterMs: 60_000 })
        expect((await mustRead(fence)).staleAfterMs).toBe(60_000)
        await leaseOlderThan(fence, 20)
        expect(await store.takeOver(await mustRead(fence), { fenceToken: randomUUID(), staleAfterMs: 20, ttlMs: DAY_MS })).toBeNull()
        expect((await mustRead(fence)).fenceToken).toBe(fence.fenceToken)
      })

      test('a settled key is never taken over', async () => {
        const { fence } = await claimed()
        expect(await complete(store, fence, completed)).toBe(true)
        await leaseOlderThan(fence, 20)
        expect(await store.takeOver(await mustRead(fence), { fenceToken: randomUUID(), staleAfterMs: 20, ttlMs: DAY_MS })).toBeNull()
        expect((await mustRead(fence)).status).toBe('completed')
      })

      test('a take-over of a claim past its TTL pushes the expiry to at least ttlMs from now (Invariant 11)', async () => {
        const { fence } = await claimed({ ttlMs: 100 })
        await expired(fence)
        const taken = await store.takeOver(await mustRead(fence), { fenceToken: randomUUID(), staleAfterMs: 50, ttlMs: DAY_MS })
        expect(taken).not.toBeNull()
        expect((await mustRead(fence)).expiresInMs).toBeGreaterThan(DAY_MS - 60_000)
      })
    })

    describe('release and suspend', () => {
      test('a released claim is gone: the key is free again', async () => {
        const { fence } = await claimed()
        expect(await store.release(fence)).toBe(true)
        expect(await read(fence)).toBeNull()
        expect((await store.claim(request(fence.scope, fence.key))).kind).toBe('inserted')
      })

      test('an interrupted claim is never released, even by its holder (Invariant 11)', async () => {
        const { fence } = await claimed()
        await leaseOlderThan(fence, 20)
        const taken = await store.takeOver(await mustRead(fence), { fenceToken: randomUUID(), staleAfterMs: 20, ttlMs: DAY_MS })
        if (taken === null) throw new Error('the stale claim was not taken over')
        expect(await store.release({ ...fence, fenceToken: taken.fenceToken })).toBe(false)
        expect(await mustRead(fence)).toMatchObject({ status: 'in_progress', fenceToken: taken.fenceToken, interrupted: true })
      })

      test('a suspended claim keeps its recovery point and why, holds no token, and is taken over at once whatever the threshold', async () => {
        const { claim, fence } = await claimed()
        expect(await store.commitStep(fence, 'charge', { id: 'ch_1' })).toBe(true)
        expect(await store.suspend(fence, 'the completion failed: 23505')).toBe(true)
        const suspended = await mustRead(fence)
        expect(suspended).toMatchObject({ status: 'in_progress', fenceToken: null, interrupted: true, recoveryPoint: 'charge', outcomeError: 'the completion failed: 23505' })
        expect(await store.commitStep(fence, 'late', {})).toBe(false)
        const token = randomUUID()
        const taken = await store.takeOver(suspended, { fenceToken: token, staleAfterMs: DAY_MS, ttlMs: DAY_MS })
        expect(taken).toMatchObject({ claimId: claim.claimId, fenceToken: token, recoveryPoint: 'charge', stepResults: { charge: { id: 'ch_1' } }, interrupted: true })
      })

      test('a suspension without an error records none', async () => {
        const { fence } = await claimed()
        expect(await store.suspend(fence)).toBe(true)
        expect(await mustRead(fence)).toMatchObject({ interrupted: true, fenceToken: null, outcomeError: null })
      })
    })

    describe('expiry (Invariant 9)', () => {
      test('a settled key past its TTL is reported expired, and is reclaimed as a new operation: a new identity, nothing of the old one', async () => {
        const { claim, fence } = await claimed({ ttlMs: 100 })
        expect(await store.commitStep(fence, 'charge', { id: 'ch_old' })).toBe(true)
        expect(await complete(store, fence, completed)).toBe(true)
        await expired(fence)
        // The store never decides that a key is new: the claim reports the expired row.
        const seen = await store.claim(request(fence.scope, fence.key, { fingerprint: otherFingerprint }))
        expect(seen.kind).toBe('existing')
        if (seen.kind === 'existing') expect(seen.snapshot.expiresInMs).toBeLessThanOrEqual(0)
        const fresh = { claimId: randomUUID(), fenceToken: randomUUID() }
        const reclaimed = await store.reclaimExpired(await mustRead(fence), { fingerprint: otherFingerprint, ttlMs: DAY_MS, ...fresh })
        expect(reclaimed).toEqual({ scope: fence.scope, key: fence.key, ...fresh, recoveryPoint: null, stepResults: {}, startedSteps: [], interrupted: false })
        expect(reclaimed?.claimId).not.toBe(claim.claimId)
        expect(await mustRead(fence)).toMatchObject({ status: 'in_progress', fingerprint: otherFingerprint, response: null, outcomeError: null })
        expect((await mustRead(fence)).expiresInMs).toBeGreaterThan(DAY_MS - 60_000)
      })

      test('a settled key within its TTL is not reclaimed', async () => {
        const { fence } = await claimed()
        expect(await complete(store, fence, completed)).toBe(true)
        expect(await store.reclaimExpired(await mustRead(fence), { fingerprint, ttlMs: DAY_MS, claimId: randomUUID(), fenceToken: randomUUID() })).toBeNull()
        expect((await mustRead(fence)).status).toBe('completed')
      })

      test('a running claim past its TTL is never reclaimed (Invariant 11)', async () => {
        const { claim, fence } = await claimed({ ttlMs: 100 })
        await expired(fence)
        expect(await store.reclaimExpired(await mustRead(fence), { fingerprint, ttlMs: DAY_MS, claimId: randomUUID(), fenceToken: randomUUID() })).toBeNull()
        expect(await mustRead(fence)).toMatchObject({ status: 'in_progress', claimId: claim.claimId, fenceToken: fence.fenceToken })
      })

      test(`${RACE_WIDTH} reclaimers of one expired key at once: exactly one wins`, async () => {
        const { fence } = await claimed({ ttlMs: 100 })
        expect(await complete(store, fence, completed)).toBe(true)
        await expired(fence)
        const seen = await mustRead(fence)
        const start = latch(RACE_WIDTH)
        const reclaimed = await Promise.all(
          Array.from({ length: RACE_WIDTH }, async () => {
            await start.arrive()
            return store.reclaimExpired(seen, { fingerprint, ttlMs: DAY_MS, claimId: randomUUID(), fenceToken: randomUUID() })
          }),
        )
        expect(reclaimed.filter((state) => state !== null)).toHaveLength(1)
      })
    })
  })
}
