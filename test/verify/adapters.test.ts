import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, type Engine } from '../../src/engine/engine.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { CHECK_IDS, formatTable, runConformance } from '../../src/verify/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startProbeServer, type ProbeServer } from './support/probe-server.js'
import { FRAMEWORKS, startTarget } from './support/targets.js'

let db: TestDatabase
let engine: Engine<Queryable>
let probe: ProbeServer

beforeAll(async () => {
  db = await createTestDatabase({ max: 20 })
  engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 30_000 })
  probe = await startProbeServer()
})

afterAll(async () => {
  await probe?.close()
  await db?.close()
})

/** Every check passes but `ttl`, which waits for a TTL and has its own test. */
const EVERY_CHECK_BUT_TTL = Object.fromEntries(CHECK_IDS.map((id) => [id, id === 'ttl' ? 'skip' : 'pass']))

describe('oncely verify against each adapter', () => {
  for (const [index, framework] of FRAMEWORKS.entries()) {
    // Both kinds of probe: a total for some, one per key (`{key}`) for the others.
    const perKey = index % 2 === 1
    it(`passes every check against ${framework}, with a probe counting ${perKey ? 'per key' : 'in total'}`, { timeout: 60_000 }, async () => {
      const target = await startTarget(framework, engine, probe)
      try {
        const report = await runConformance({
          url: target.url,
          body: '{"amount":1000,"currency":"usd","customer":"cus_1","meta":{"b":1,"a":2}}',
          headers: { authorization: 'Bearer demo_1' },
          otherHeaders: { authorization: 'Bearer demo_2' },
          probe: perKey ? probe.perKeyUrl : probe.totalUrl,
          failBody: '{"fail":true,"amount":1}',
        })
        expect(Object.fromEntries(report.results.map((result) => [result.id, result.outcome])), formatTable(report)).toEqual(EVERY_CHECK_BUT_TTL)
        expect(report.results.find((result) => result.id === 'retry-after')?.seen).toMatch(/^\d+ × 409 with Retry-After 1$/)
        // The cut request reached the server before the cut (whether it then ran depends on
        // when the server noticed the closed connection): more than the retry arrived.
        expect(target.arrivals.get('cut-before-response')).toBeGreaterThanOrEqual(2)
        expect(report.ok).toBe(true)
      } finally {
        await target.close()
      }
    })
  }
})
