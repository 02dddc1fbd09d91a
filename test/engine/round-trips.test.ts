import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest } from '../../src/index.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { countingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { jsonResponse, owned } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE charges (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })

function setup() {
  const pool = countingPool(db.pool)
  const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }) })
  return { pool, engine }
}

describe('round trips per outcome (DESIGN.md cost budget)', () => {
  it('a fresh key: one statement for the claim, one for a plain completion', async () => {
    const { pool, engine } = setup()
    const execution = owned(await engine.begin({ scope: 'u1', key: 'rt-fresh', fingerprint }))
    expect(pool.statements).toEqual(['WITH existing'])
    await execution.complete(jsonResponse(201, '{}'))
    expect(pool.statements).toHaveLength(2)
    expect(pool.statements[1]).toMatch(/^UPDATE /)
  })

  it('a fresh key with business writes: the claim, then one transaction holding the writes and the completion', async () => {
    const { pool, engine } = setup()
    const execution = owned(await engine.begin({ scope: 'u1', key: 'rt-tx', fingerprint }))
    await execution.completeInTransaction(async (tx) => {
      await tx.query({ text: 'INSERT INTO charges (id) VALUES ($1)', values: ['ch_rt'] })
      return { response: jsonResponse(201, '{"id":"ch_rt"}'), value: undefined }
    })
    // BEGIN carries the store's SET LOCAL timeouts in the same simple query: one round trip. This
    // counting wrapper is not `pg`'s own client, so nothing rides with anything
    // (test/store/opened-by-first.test.ts counts a `pg` pool): the completion, the transaction's
    // last statement, is the one that fails in the database on a lost fence, ready to leave with
    // the COMMIT where the connection takes them together.
    expect(pool.statements).toEqual(['WITH existing', pool.statements[1], 'INSERT INTO', 'WITH done', 'COMMIT'])
    expect(pool.statements[1]).toMatch(/^BEGIN\b/)
  })

  it.each([
    ['replay', 'rt-replay'],
    ['conflict', 'rt-conflict'],
    ['mismatch', 'rt-mismatch'],
  ])('a %s: one statement', async (kind, key) => {
    const { pool, engine } = setup()
    const execution = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    if (kind !== 'conflict') await execution.complete(jsonResponse(201, '{}'))
    pool.reset()
    const probe = kind === 'mismatch' ? fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 2 } }) : fingerprint
    const decision = await engine.begin({ scope: 'u1', key, fingerprint: probe })
    expect(decision.kind).toBe(kind)
    expect(pool.statements).toEqual(['WITH existing'])
    if (kind === 'conflict') await execution.release()
  })
})
