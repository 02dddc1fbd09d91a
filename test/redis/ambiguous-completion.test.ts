import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type Engine } from '../../src/index.js'
import { createRedisCache, withRedisCache } from '../../src/redis/index.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { jsonResponse, owned } from '../helpers/engine.js'
import { redisForTests, testRedis } from './support/test-redis.js'

// Issue 22, point 3: a completion whose answer was lost (the connection to PostgreSQL cut right
// after it committed) is recognised by the engine on its read-back, and the client gets its 201.
// The cache must not go on answering 409 from the in-flight entry it wrote at the claim: before,
// it did for up to inFlightMaxMs, since the completion's repeat found the fence gone and nothing
// took the entry back.
const availability = await redisForTests()

describe.skipIf(!availability.run)('the Redis cache after an ambiguous completion', () => {
  let db: TestDatabase
  let proxy: TcpProxy
  let pool: pg.Pool
  let client: Awaited<ReturnType<typeof testRedis>>
  let engine: Engine<Queryable>
  beforeAll(async () => {
    db = await createTestDatabase()
    proxy = await startTcpProxy(db.url)
    pool = new pg.Pool({ connectionString: proxy.url, max: 4, connectionTimeoutMillis: 2000 })
    pool.on('error', () => undefined)
    client = await testRedis()
    // A long in-flight life, so a 409 left behind is seen whatever the machine's load.
    const cache = createRedisCache({ redis: client.redis, secret: 'the ambiguous completion secret', prefix: client.prefix, namespace: db.schema, staleAfterMs: 60_000, inFlightMaxMs: 30_000 })
    engine = createEngine<Queryable>({ store: withRedisCache(createPostgresStore({ pool, schema: db.schema }), cache), staleAfterMs: 60_000 })
  })
  afterAll(async () => {
    await client?.close()
    await pool?.end()
    await proxy?.close()
    await db?.close()
  })

  const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 25 } })

  for (const [name, finish] of [
    ['complete', (execution: ReturnType<typeof owned>) => execution.complete(jsonResponse(201, '{"id":"ch_amb"}'))],
    ['completeInTransaction', (execution: ReturnType<typeof owned>) => execution.completeInTransaction(async () => ({ response: jsonResponse(201, '{"id":"ch_amb"}'), value: 1 }))],
  ] as const) {
    it(`${name}: the retry gets the replay, not a 409`, async () => {
      const key = `ambiguous-${name}`
      const execution = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
      const cut = proxy.cutNextAnswer({ to: name === 'complete' ? '_complete' : 'COMMIT' })
      await finish(execution)
      await cut
      expect(execution.state).toBe('completed')
      const retry = await engine.begin({ scope: 'u1', key, fingerprint })
      expect(retry.kind).toBe('replay')
      if (retry.kind === 'replay') expect(Buffer.from(retry.response.body).toString()).toBe('{"id":"ch_amb"}')
    })
  }
})
