import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type EncryptionOptions } from '../../src/index.js'
import { openResponse, sealResponse } from '../../src/engine/encrypted-store.js'
import { resolveKeyring } from '../../src/engine/encryption-keys.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// The encrypting store decorator (issue 23) on every path the engine writes or reads a sealed
// value by, on the real PostgreSQL: results carried by a later write, an at-most-once mark, a
// key reclaimed past its TTL, a key never seen. test/engine/encryption.test.ts has the plain
// complete, take-over, rotation and tampering cases.
const encryption: EncryptionOptions = { keys: { A: randomBytes(32) }, current: 'A' }
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })

let db: TestDatabase
let n = 0
const newKey = () => `sealed-${n++}`
const engine = () => createEngine<Queryable>({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), encryption })
async function row(key: string) {
  const { rows } = await db.pool.query<{ status: string; recovery_point: string | null; step_results: Record<string, unknown>; started_steps: string[]; response_body: Buffer | null }>(
    `SELECT status, recovery_point, step_results, started_steps, response_body FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}
const inClear = (stored: unknown, secret: string) => JSON.stringify(stored).includes(secret)

beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('the encrypting store', () => {
  it("seals a deferred result where the next committed step carries it, and a take-over opens it", async () => {
    const key = newKey()
    const first = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    await first.step('quote', () => ({ quote: 'q_secret_1' }), { commit: 'with-next-write' })
    await first.step('charge', () => ({ charge: 'ch_secret_1' }))
    const stored = await row(key)
    expect(Object.keys(stored?.step_results ?? {}).sort()).toEqual(['charge', 'quote'])
    expect(inClear(stored?.step_results, 'q_secret_1')).toBe(false)
    expect(inClear(stored?.step_results, 'ch_secret_1')).toBe(false)
    await first.suspend()
    const next = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    expect(next.how).toBe('take-over')
    expect(await next.step('quote', () => ({ quote: 'again' }), { commit: 'with-next-write' })).toEqual({ quote: 'q_secret_1' })
    expect(await next.step('charge', () => ({ charge: 'again' }))).toEqual({ charge: 'ch_secret_1' })
    await next.complete(jsonResponse(201, '{}'))
  })

  it('marks an at-most-once step started, sealing the deferred result it carries, so a take-over never runs it again', async () => {
    const key = newKey()
    const first = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    await first.step('quote', () => ({ quote: 'q_secret_2' }), { commit: 'with-next-write' })
    await first.step('receipt', () => ({ sent: true }), { delivery: 'at-most-once', commit: 'with-next-write' })
    const stored = await row(key)
    expect(stored?.started_steps).toEqual(['receipt'])
    expect(stored?.recovery_point).toBe('quote')
    expect(Object.keys(stored?.step_results ?? {})).toEqual(['quote'])
    expect(inClear(stored?.step_results, 'q_secret_2')).toBe(false)
    // The handler dies before the receipt's result is written: the claim goes stale.
    await ageClaim(db, 'u1', key)
    const next = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    expect(next.how).toBe('take-over')
    expect(await next.step('quote', () => ({ quote: 'again' }))).toEqual({ quote: 'q_secret_2' })
    let ran = false
    // Started and never finished: its function is not run again, and it has no result.
    expect(await next.step('receipt', () => ((ran = true), { sent: true }), { delivery: 'at-most-once' })).toBeUndefined()
    expect(ran).toBe(false)
    await first.release().catch(() => undefined)
  })

  it('reclaims a key past its TTL as a new request: the old sealed outcome is neither replayed nor opened for the new run', async () => {
    const key = newKey()
    const first = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    await first.step('charge', () => ({ charge: 'ch_old' }))
    await first.complete(jsonResponse(201, '{"id":"ch_old"}'))
    await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 second' WHERE scope = 'u1' AND key = $1`, [key])
    const again = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    expect(again.how).toBe('reclaimed-expired')
    let ran = false
    expect(await again.step('charge', () => ((ran = true), { charge: 'ch_new' }))).toEqual({ charge: 'ch_new' })
    expect(ran).toBe(true)
    await again.complete(jsonResponse(201, '{"id":"ch_new"}'))
    expect((await row(key))?.response_body?.includes('ch_new')).toBe(false)
    const replay = await engine().begin({ scope: 'u1', key, fingerprint })
    if (replay.kind !== 'replay') throw new Error(replay.kind)
    expect(Buffer.from(replay.response.body).toString()).toBe('{"id":"ch_new"}')
  })

  it('reads a key it has never seen as no key at all', async () => {
    expect(await engine().inspect({ scope: 'u1', key: newKey() })).toBeNull()
  })

  it('opens an in-progress claim, sealed steps and no response yet, for inspect', async () => {
    const key = newKey()
    const first = owned(await engine().begin({ scope: 'u1', key, fingerprint }))
    await first.step('charge', () => ({ charge: 'ch_seen' }))
    const seen = await engine().inspect({ scope: 'u1', key })
    expect(seen?.steps).toEqual({ charge: { charge: 'ch_seen' } })
    await first.release()
  })
})

describe('the sealed response', () => {
  // Sealed by this code once, with a fixed key: every later version must still open it, so the
  // framing (a uint32 length, the headers' JSON, the body) and the field it is bound to stay.
  const fixed = resolveKeyring({ keys: { 'k-2026': Buffer.alloc(32, 7) }, current: 'k-2026' })
  const where = { scope: 'u1', key: 'order-1' }
  it('a response sealed by an earlier version opens with its headers and body', () => {
    const body = Buffer.from(
      'AG9lAQZrLTIwMjYFoMoe8SeLjUg/cWo4sBJBEusRLJtmv768dHzw9NQGl/hAth/h/qKiBzD6818xfSgN8XxzpjziA8gPiECtJO1lPEjDzGgGkM6glqJYgQCLHni7',
      'base64',
    )
    const opened = openResponse(fixed, where, { status: 201, headers: [], body })
    expect(opened.status).toBe(201)
    expect(opened.headers).toEqual([['content-type', 'application/json']])
    expect(opened.body.toString()).toBe('{"id":"ch_1"}')
  })

  it('keeps the status in clear and no header outside the seal', () => {
    const sealed = sealResponse(fixed, where, { status: 402, headers: [['location', '/v1/charges/ch_2']], body: Buffer.from('{"id":"ch_2"}') })
    expect(sealed.status).toBe(402)
    expect(sealed.headers).toEqual([])
    expect(Buffer.from(sealed.body).includes('ch_2')).toBe(false)
    const opened = openResponse(fixed, where, sealed)
    expect(opened.headers).toEqual([['location', '/v1/charges/ch_2']])
    expect(opened.body.toString()).toBe('{"id":"ch_2"}')
  })
})
