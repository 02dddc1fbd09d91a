import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// The claim statement answers an existing key with its row as one JSON text, its body in base64
// (issue 21: node-postgres's per-column cost). What the store hands the engine must be the row
// exactly as the read statement, whose columns are plain, gives it back.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 3 } })
const claimOf = (key: string, fenceToken = randomUUID(), claimId = randomUUID()) => ({ scope: 'snap', key, fingerprint, ttlMs: 86_400_000, claimId, fenceToken })

describe('the claim of an existing key', () => {
  it('gives the stored row as the read statement does: every byte of a binary body, headers, steps, times', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const fenceToken = randomUUID()
    const claimId = randomUUID()
    const fresh = await store.claim(claimOf('binary', fenceToken, claimId))
    expect(fresh).toEqual({ kind: 'inserted', claim: { scope: 'snap', key: 'binary', claimId, fenceToken, recoveryPoint: null, stepResults: {}, startedSteps: [], interrupted: false } })
    const fence = { scope: 'snap', key: 'binary', fenceToken }
    expect(await store.markStepStarted(fence, 'receipt')).toBe(true)
    expect(await store.commitStep(fence, 'charge', { id: 'ch_1', note: 'é "quoted" \\ done' })).toBe(true)
    // Every byte value, and longer than one base64 line of PostgreSQL's encode() (76 characters).
    const body = Buffer.from([...Array.from({ length: 256 }, (_, i) => i), ...Array.from({ length: 300 }, (_, i) => (i * 7) % 256)])
    const headers: Array<[string, string]> = [['content-type', 'application/octet-stream'], ['set-cookie', 'a=1'], ['set-cookie', 'b=2']]
    expect(await store.complete(fence, { status: 'completed', response: { status: 201, headers, body } })).toBe(true)

    const again = await store.claim(claimOf('binary'))
    const read = await store.read('snap', 'binary')
    if (again.kind !== 'existing' || read === null) throw new Error(`the completed key was not found: ${again.kind}`)
    expect(Buffer.from(again.snapshot.response!.body)).toEqual(body)
    expect(again.snapshot.response!.headers).toEqual(headers)
    expect(again.snapshot).toMatchObject({ status: 'completed', claimId, fenceToken, recoveryPoint: 'charge', stepResults: { charge: { id: 'ch_1', note: 'é "quoted" \\ done' } }, startedSteps: ['receipt'], interrupted: false, outcomeError: null, staleAfterMs: null })
    const { ageMs, leaseAgeMs, expiresInMs, ...rest } = again.snapshot
    const { ageMs: readAge, leaseAgeMs: readLease, expiresInMs: readExpires, ...readRest } = read
    expect({ ...rest, response: { ...rest.response, body: Buffer.from(rest.response!.body) } }).toEqual({ ...readRest, response: { ...readRest.response, body: Buffer.from(readRest.response!.body) } })
    // Measured by the database's clock a moment apart: the claim's first.
    expect(typeof ageMs).toBe('number')
    expect(ageMs).toBeGreaterThanOrEqual(0)
    expect(ageMs).toBeLessThanOrEqual(readAge)
    expect(leaseAgeMs).toBeNull()
    expect(readLease).toBeNull()
    expect(expiresInMs).toBeGreaterThanOrEqual(readExpires)
    expect(expiresInMs).toBeGreaterThan(86_000_000)
  })

  it('gives a running claim with its lease age, stale threshold and no response', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const claimId = randomUUID()
    const fenceToken = randomUUID()
    await store.claim({ ...claimOf('running', fenceToken, claimId), staleAfterMs: 4500 })
    const again = await store.claim(claimOf('running'))
    if (again.kind !== 'existing') throw new Error('the running key was claimed twice')
    expect(again.snapshot).toMatchObject({ status: 'in_progress', claimId, fenceToken, response: null, staleAfterMs: 4500, stepResults: {}, startedSteps: [] })
    expect(again.snapshot.leaseAgeMs).toBeGreaterThanOrEqual(0)
    expect(again.snapshot.leaseAgeMs).toBeLessThan(60_000)
  })
})
