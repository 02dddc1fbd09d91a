import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })

async function row(key: string) {
  const { rows } = await db.pool.query<{ status: string; recovery_point: string | null; step_results: Record<string, unknown>; locked_at: Date; fence_token: string | null }>(
    `SELECT status, recovery_point, step_results, locked_at, fence_token::text FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

describe('fencing after a take-over', () => {
  it("the old owner's step, lease renewal and completion all fail with lock lost and change nothing", async () => {
    const { engine: slow } = engineOn(db, { staleAfterMs: 60_000 })
    const old = owned(await slow.begin({ scope: 'u1', key: 'fence-1', fingerprint }))
    await old.step('reserve', async () => ({ reserved: true }))
    await ageClaim(db, 'u1', 'fence-1')
    const { engine: fresh } = engineOn(db, { staleAfterMs: 1000 })
    const taker = owned(await fresh.begin({ scope: 'u1', key: 'fence-1', fingerprint }))
    expect(taker.how).toBe('take-over')
    expect(taker.recoveryPoint).toBe('reserve')
    const before = await row('fence-1')

    // A step: the side effect runs (it was in flight), but its result cannot commit.
    await expect(old.step('charge', async () => ({ charged: 'old' }))).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    // Lease renewal, through the store with the old token.
    const { store } = engineOn(db)
    expect(await store.renewLease({ scope: 'u1', key: 'fence-1', fenceToken: old.fenceToken }, 60_000)).toBe(false)
    // Completion, release and suspend.
    await expect(old.complete(jsonResponse(201, '{"by":"old"}'))).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    expect(await store.complete({ scope: 'u1', key: 'fence-1', fenceToken: old.fenceToken }, { status: 'completed', response: jsonResponse(201, '{}') })).toBe(false)
    expect(await store.release({ scope: 'u1', key: 'fence-1', fenceToken: old.fenceToken })).toBe(false)
    expect(await store.suspend({ scope: 'u1', key: 'fence-1', fenceToken: old.fenceToken })).toBe(false)

    expect(await row('fence-1')).toEqual(before)
    await taker.complete(jsonResponse(201, '{"by":"taker"}'))
    const replay = await fresh.begin({ scope: 'u1', key: 'fence-1', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"by":"taker"}')
  })

  it("a live owner's lease renewal keeps its claim from going stale", async () => {
    const { engine } = engineOn(db, { staleAfterMs: 300, leaseRenewMs: 50 })
    const owner = owned(await engine.begin({ scope: 'u1', key: 'lease-1', fingerprint }))
    const first = (await row('lease-1'))?.locked_at
    await vi.waitFor(async () => expect((await row('lease-1'))?.locked_at.getTime()).toBeGreaterThan(first?.getTime() ?? 0), { timeout: 2000 })
    // A retry now sees a fresh lease: conflict, not a take-over.
    expect((await engine.begin({ scope: 'u1', key: 'lease-1', fingerprint })).kind).toBe('conflict')
    await owner.release()
  })

  it('an owner whose lease renewal finds the claim taken over stops renewing and is lost', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000, leaseRenewMs: 50 })
    const old = owned(await engine.begin({ scope: 'u1', key: 'lease-2', fingerprint }))
    await ageClaim(db, 'u1', 'lease-2')
    const { engine: fresh } = engineOn(db, { staleAfterMs: 1000 })
    const taker = owned(await fresh.begin({ scope: 'u1', key: 'lease-2', fingerprint }))
    await vi.waitFor(() => expect(old.state).toBe('lost'), { timeout: 2000 })
    await expect(old.complete(jsonResponse(201, '{}'))).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    await taker.release()
  })
})

describe('the fence token', () => {
  it('survives a round trip through JavaScript and JSON, where a timestamptz through a Date does not', async () => {
    const { engine, store } = engineOn(db)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'token-1', fingerprint }))
    // The claim's locked_at carries microseconds; a Date keeps milliseconds.
    await db.pool.query(`UPDATE ${keyTable(db)} SET locked_at = '2026-01-01 00:00:00.123456+00' WHERE scope = 'u1' AND key = 'token-1'`)
    const asDate = (await row('token-1'))?.locked_at
    const viaDate = await db.pool.query(`SELECT 1 FROM ${keyTable(db)} WHERE scope = 'u1' AND key = 'token-1' AND locked_at = $1`, [asDate])
    expect(viaDate.rowCount).toBe(0)
    // The real token, carried through JSON (as between processes), still fences exactly.
    const carried = JSON.parse(JSON.stringify({ token: execution.fenceToken })) as { token: string }
    expect(await store.renewLease({ scope: 'u1', key: 'token-1', fenceToken: carried.token }, 60_000)).toBe(true)
    await execution.release()
  })
})

describe('PostgreSQL types', () => {
  it('the token column is read as text, never as a Date', async () => {
    const client = new pg.Client({ connectionString: db.url })
    await client.connect()
    const { rows } = await client.query<{ data_type: string }>(
      `SELECT data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'idempotency_key' AND column_name = 'fence_token'`,
      [db.schema],
    )
    await client.end()
    expect(rows[0]?.data_type).toBe('uuid')
  })
})
