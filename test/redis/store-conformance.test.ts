import { createRedisCache, withRedisCache } from '../../src/redis/index.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase } from '../helpers/db.js'
import { storeConformance } from '../store/conformance.js'
import { redisForTests, testRedis } from './support/test-redis.js'

// The store port's conformance table (test/store/conformance.ts) against the PostgreSQL store
// with the Redis cache in front (Invariant 10: the cache changes no answer of the port).
const availability = await redisForTests()

storeConformance<Queryable>({
  name: 'the PostgreSQL store behind the Redis cache',
  skip: !availability.run,
  async open() {
    const db = await createTestDatabase()
    const client = await testRedis()
    const cache = createRedisCache({ redis: client.redis, secret: 'the store conformance secret', prefix: client.prefix, namespace: db.schema, staleAfterMs: 10_000, inFlightMaxMs: 5000 })
    return {
      store: withRedisCache(createPostgresStore({ pool: db.newPool(24), schema: db.schema }), cache),
      async close() {
        await client.close()
        await db.close()
      },
    }
  },
})
