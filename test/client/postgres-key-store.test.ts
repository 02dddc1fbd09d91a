import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { postgresKeyStore, type PostgresKeyStore } from '../../src/client/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { candidate, keyStoreContract } from './key-store-contract.js'

let db: TestDatabase
let tables = 0
beforeAll(async () => {
  db = await createTestDatabase({ max: 25, connections: 75 })
  // Identifiers with a space, capitals and a quote must survive (docs/conventions.md, SQL).
  await db.pool.query('CREATE SCHEMA "Client Keys"')
})
afterAll(async () => {
  await db.close()
})

/** A fresh table per test, in a schema whose name needs quoting. */
async function freshStore(): Promise<{ store: PostgresKeyStore; options: { schema: string; table: string } }> {
  const options = { schema: 'Client Keys', table: `Keys "${++tables}"` }
  const store = postgresKeyStore(db.pool, options)
  await store.setup()
  return { store, options }
}

keyStoreContract('postgresKeyStore', async () => {
  const { store, options } = await freshStore()
  // Another pool: another process's connections to the same table.
  const other = db.newPool(30)
  return { store, sameStore: () => postgresKeyStore(other, options) }
})

describe('postgresKeyStore', () => {
  it('setup is idempotent and safe to run concurrently', async () => {
    // Separate connections, so the setups really overlap in the server; several rounds, because
    // the catalog race (CI saw `type "…" already exists`) needs the creates to meet exactly.
    const pool = db.newPool(20)
    const clients = await Promise.all(Array.from({ length: 20 }, () => pool.connect()))
    try {
      for (let round = 0; round < 10; round++) {
        const options = { schema: 'Client Keys', table: `concurrent setup ${round}` }
        await Promise.all(clients.map((client) => postgresKeyStore(client, options).setup()))
        await postgresKeyStore(db.pool, options).setup()
        const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM "Client Keys"."concurrent setup ${round}"`)
        expect(rows[0]?.n).toBe('0')
      }
    } finally {
      for (const client of clients) client.release()
    }
  })

  it('20 claims on 20 real connections at once agree on one key', async () => {
    const { options } = await freshStore()
    const pool = db.newPool(20)
    const clients = await Promise.all(Array.from({ length: 20 }, () => pool.connect()))
    try {
      const records = await Promise.all(clients.map((client, i) => postgresKeyStore(client, options).claim(candidate('race', `key-${i}`))))
      expect(new Set(records.map((r) => r.key)).size).toBe(1)
    } finally {
      for (const client of clients) client.release()
    }
  })

  it('binds every value: an operationId that looks like SQL is just a name', async () => {
    const { store } = await freshStore()
    const operationId = "x'); DROP TABLE \"Client Keys\".\"Keys\"; --"
    expect((await store.claim(candidate(operationId, 'k'))).operationId).toBe(operationId)
  })

  it('refuses a bad table name and a bad db', () => {
    expect(() => postgresKeyStore(db.pool, { table: '' })).toThrow(expect.objectContaining({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining('table') as unknown }) as Error)
    expect(() => postgresKeyStore({} as never)).toThrow(expect.objectContaining({ code: 'ONCELY_INVALID_OPTION' }) as Error)
  })

  it('publishes the SQL setup runs', async () => {
    const { store } = await freshStore()
    expect(store.setupSql).toContain('CREATE TABLE IF NOT EXISTS "Client Keys"."Keys ""')
  })
})
