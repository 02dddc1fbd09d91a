import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { sweepExpiredKeys } from '../../src/ops/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'
import { latch } from '../helpers/deferred.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase({ max: 30 })
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: {} })

describe('sweeper', () => {
  it('deletes expired keys in batches and leaves live ones', async () => {
    const { engine, store } = engineOn(db)
    for (let i = 0; i < 25; i++) {
      const decision = await engine.begin({ scope: 'sweep', key: `k${i}`, fingerprint })
      if (decision.kind === 'execute') await decision.execution.complete(jsonResponse(201, '{}'))
    }
    await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 minute' WHERE scope = 'sweep' AND key <> 'k0'`)
    const result = await sweepExpiredKeys(store, { batchSize: 10 })
    expect(result).toEqual({ deleted: 24, batches: 3 })
    const { rows } = await db.pool.query<{ key: string }>(`SELECT key FROM ${keyTable(db)} WHERE scope = 'sweep'`)
    expect(rows.map((row) => row.key)).toEqual(['k0'])
  })

  it('racing 20 reclaims of expired keys, never deletes a key a request is reclaiming', async () => {
    const { engine, store } = engineOn(db, {}, db.newPool(20))
    const keys = Array.from({ length: 20 }, (_, i) => `live-${i}`)
    for (let round = 0; round < 5; round++) {
      for (const key of keys) {
        const decision = await engine.begin({ scope: 'race', key, fingerprint })
        if (decision.kind === 'execute') await decision.execution.complete(jsonResponse(201, `{"round":${round}}`))
      }
      await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 minute' WHERE scope = 'race'`)
      const start = latch(keys.length + 1)
      const [, ...outcomes] = await Promise.all([
        (async () => {
          await start.arrive()
          return sweepExpiredKeys(store, { batchSize: 3 })
        })(),
        ...keys.map(async (key) => {
          await start.arrive()
          const decision = await engine.begin({ scope: 'race', key, fingerprint })
          if (decision.kind !== 'execute') return `not executed: ${decision.kind}`
          // The fenced completion fails if the sweeper deleted the reclaimed row.
          await decision.execution.complete(jsonResponse(201, `{"round":${round},"again":true}`))
          return 'completed'
        }),
      ])
      expect(outcomes).toEqual(keys.map(() => 'completed'))
      const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${keyTable(db)} WHERE scope = 'race' AND status = 'completed' AND expires_at > now()`)
      expect(rows[0]?.n).toBe(keys.length)
    }
  })
})
