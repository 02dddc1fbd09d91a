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
  knownFailures: {
    // src/redis/cached-store.ts: a completion announces a settled entry that lives until the key's
    // expiry as the claim set it, less a margin; when that is already past (a TTL shorter than the
    // margin, or a handler that ran past the claim's TTL on renewed leases), nothing is written and
    // the claim's in-flight entry stays, answering claims as in progress (409, or 422 for another
    // body) for up to inFlightMaxMs after the completion, where PostgreSQL alone replays, or
    // reclaims the expired key.
    'a settled key past its TTL is reported expired, and is reclaimed as a new operation: a new identity, nothing of the old one': 'a completion that cannot write its settled entry leaves the in-flight one',
  },
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
