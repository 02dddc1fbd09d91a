import { randomBytes } from 'node:crypto'
import { withEncryption } from '../../src/engine/encrypted-store.js'
import { resolveKeyring } from '../../src/engine/encryption-keys.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase } from '../helpers/db.js'
import { storeConformance } from './conformance.js'

// The store port's conformance table (test/store/conformance.ts) against the PostgreSQL store,
// alone and sealed by the encryption decorator; the Redis-cached store runs it in
// test/redis/store-conformance.test.ts.

/** The PostgreSQL store on a database of its own, with connections enough for the table's 20-wide races. */
async function postgresStore() {
  const db = await createTestDatabase()
  return { store: createPostgresStore({ pool: db.newPool(24), schema: db.schema }), close: () => db.close() }
}

storeConformance<Queryable>({ name: 'the PostgreSQL store', open: postgresStore })

storeConformance<Queryable>({
  name: 'the PostgreSQL store, encrypted at rest',
  async open() {
    const { store, close } = await postgresStore()
    return { store: withEncryption(store, resolveKeyring({ keys: { k1: randomBytes(32) }, current: 'k1' })), close }
  },
})
