import 'reflect-metadata'
import { sql as drizzleSql } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/node-postgres'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import postgres from 'postgres'
import { DataSource } from 'typeorm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isOncelyError } from '../../src/errors.js'
import { createOutbox, uuidv7 } from '../../src/outbox/index.js'
import { uuidv7Time } from '../../src/outbox/uuid-v7.js'
import { fromDrizzle, fromKysely, fromPostgresJs, fromTypeORM, withTransaction, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

let db: TestDatabase
let outbox: ReturnType<typeof createOutbox>
beforeAll(async () => {
  db = await createTestDatabase()
  outbox = createOutbox({ schema: db.schema })
})
afterAll(async () => {
  await db.close()
})

const table = () => `"${db.schema.replaceAll('"', '""')}".outbox`
const rowsOf = async (type: string) => (await db.pool.query<{ id: string; payload: string; ordering_key: string | null; headers: Record<string, string> }>(`SELECT id::text, payload, ordering_key, headers FROM ${table()} WHERE type = $1 ORDER BY seq`, [type])).rows

class Rollback extends Error {}

describe('enqueue(tx, event)', () => {
  it('commits with the caller\'s transaction, with a UUIDv7 id and the payload\'s exact JSON text', async () => {
    const before = Date.now()
    const event = await withTransaction(db.pool, (tx) => outbox.enqueue(tx, { type: 'order.placed', key: 'cus_1', payload: { b: 1, a: [2, 'x'] } }))
    expect(event.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(uuidv7Time(event.id)).toBeGreaterThanOrEqual(before)
    expect(await rowsOf('order.placed')).toEqual([{ id: event.id, payload: '{"b":1,"a":[2,"x"]}', ordering_key: 'cus_1', headers: {} }])
  })

  it('leaves nothing when the caller\'s transaction rolls back after it', async () => {
    await expect(
      withTransaction(db.pool, async (tx) => {
        await outbox.enqueue(tx, { type: 'order.rolled-back', payload: {} })
        throw new Rollback()
      }),
    ).rejects.toBeInstanceOf(Rollback)
    expect(await rowsOf('order.rolled-back')).toEqual([])
  })

  it('refuses a handle outside a transaction (SAVEPOINT fails there) and writes nothing', async () => {
    const error = await outbox.enqueue(db.pool, { type: 'order.autocommit', payload: {} }).catch((caught: unknown) => caught)
    expect(isOncelyError(error, 'ONCELY_NOT_IN_TRANSACTION')).toBe(true)
    const client = await db.pool.connect()
    try {
      const again = await outbox.enqueue(client, { type: 'order.autocommit', payload: {} }).catch((caught: unknown) => caught)
      expect(isOncelyError(again, 'ONCELY_NOT_IN_TRANSACTION')).toBe(true)
    } finally {
      client.release()
    }
    expect(await rowsOf('order.autocommit')).toEqual([])
  })

  it('leaves no savepoint open: a later ROLLBACK TO of the caller still finds its own', async () => {
    await withTransaction(db.pool, async (tx) => {
      await tx.query({ text: 'SAVEPOINT mine' })
      await outbox.enqueue(tx, { type: 'order.savepoint', payload: 1 })
      await tx.query({ text: 'ROLLBACK TO SAVEPOINT mine' })
    })
    expect(await rowsOf('order.savepoint')).toEqual([])
  })

  it('refuses malformed events before touching the database', async () => {
    for (const event of [{ type: '', payload: 1 }, { type: 'a b', payload: 1 }, { type: 'ok', key: '', payload: 1 }, { type: 'ok', payload: 1n }, { type: 'ok', payload: 1, headers: { n: 1 } }]) {
      const error = await outbox.enqueue(db.pool, event as never).catch((caught: unknown) => caught)
      expect(isOncelyError(error, 'ONCELY_INVALID_EVENT')).toBe(true)
    }
  })

  it('refuses bad options at creation, naming them', () => {
    expect(() => createOutbox({ notify: 'yes' as never })).toThrow(/notify/)
    expect(() => createOutbox({ schema: '' })).toThrow(/schema/)
  })
})

describe('prepared statements', () => {
  it('are named per schema by default, and never with preparedStatements: false (PgBouncer in transaction mode)', async () => {
    // A session of its own: the suite's pool has prepared the outbox's statements before.
    const pool = db.newPool(1)
    const client = await pool.connect()
    try {
      // enqueue refuses a connection outside a transaction; the session's statements outlive it.
      await client.query('BEGIN')
      const preparedOnSession = async () =>
        (await client.query<{ name: string }>("SELECT name FROM pg_prepared_statements WHERE name LIKE 'oncely\\_%' ORDER BY name")).rows.map((row) => row.name)
      const unnamed = createOutbox({ schema: db.schema, preparedStatements: false })
      for (const notify of [true, false]) {
        await createOutbox({ schema: db.schema, preparedStatements: false, notify }).enqueue(client, { type: 'order.unnamed', payload: {} })
      }
      expect((await unnamed.prepareEnqueue({ type: 'order.unnamed', payload: {} })).statement.name).toBeUndefined()
      expect(await preparedOnSession()).toEqual([])
      for (const notify of [true, false]) await createOutbox({ schema: db.schema, notify }).enqueue(client, { type: 'order.named', payload: {} })
      expect(await preparedOnSession()).toEqual([expect.stringMatching(/^oncely_[0-9a-f]{8}_enqueue$/), expect.stringMatching(/^oncely_[0-9a-f]{8}_enqueue_notify$/)])
      await client.query('COMMIT')
    } finally {
      client.release()
    }
    expect(await rowsOf('order.unnamed')).toHaveLength(2)
    expect(await rowsOf('order.named')).toHaveLength(2)
  })
})

describe('enqueue through the shims of other libraries', () => {
  type Library = { inTransaction: (work: (tx: Queryable) => Promise<void>) => Promise<void>; outside: Queryable; close: () => Promise<void> }
  const libraries: Record<string, () => Library> = {
    'postgres.js': () => {
      const sql = postgres(db.url, { max: 2, onnotice: () => undefined })
      return { inTransaction: async (work) => void (await sql.begin((trx) => work(fromPostgresJs(trx)))), outside: fromPostgresJs(sql), close: () => sql.end() }
    },
    Kysely: () => {
      const kysely = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 2 }) }) })
      return { inTransaction: (work) => kysely.transaction().execute((trx) => work(fromKysely(trx))), outside: fromKysely(kysely), close: () => kysely.destroy() }
    },
    Drizzle: () => {
      const pool = new pg.Pool({ connectionString: db.url, max: 2 })
      const orm = drizzle(pool)
      return { inTransaction: (work) => orm.transaction((tx) => work(fromDrizzle(tx, drizzleSql))), outside: fromDrizzle(orm, drizzleSql), close: () => pool.end() }
    },
    TypeORM: () => {
      const source = new DataSource({ type: 'postgres', url: db.url, poolSize: 2 })
      const ready = source.initialize()
      return {
        inTransaction: async (work) => {
          await ready
          await source.transaction((manager) => work(fromTypeORM(manager.queryRunner!)))
        },
        outside: fromTypeORM(source.createQueryRunner()),
        close: async () => {
          await ready
          await source.destroy()
        },
      }
    },
  }
  for (const [name, open] of Object.entries(libraries)) {
    it(`${name}: commits in its transaction, rolls back with it, refuses its non-transactional handle`, async () => {
      const library = open()
      const type = `shim.${name.replace(/\W/g, '')}`
      try {
        await library.inTransaction((tx) => outbox.enqueue(tx, { type, key: 'k', payload: { library: name } }).then(() => undefined))
        await library
          .inTransaction(async (tx) => {
            await outbox.enqueue(tx, { type, key: 'k', payload: { rolledBack: true } })
            throw new Rollback()
          })
          .catch((error: unknown) => {
            if (!(error instanceof Rollback)) throw error
          })
        const refused = await outbox.enqueue(library.outside, { type, payload: { outside: true } }).catch((caught: unknown) => caught)
        expect(isOncelyError(refused, 'ONCELY_NOT_IN_TRANSACTION')).toBe(true)
        expect((await rowsOf(type)).map((row) => JSON.parse(row.payload) as unknown)).toEqual([{ library: name }])
      } finally {
        await library.close()
      }
    })
  }
})

describe('uuidv7', () => {
  it('mints version-7, variant-10 ids that sort in minting order within a process', () => {
    const ids = Array.from({ length: 5000 }, () => uuidv7())
    expect(new Set(ids).size).toBe(ids.length)
    expect([...ids].sort()).toEqual(ids)
    for (const id of ids.slice(0, 50)) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(uuidv7Time(uuidv7(Date.UTC(2030, 0, 1) ))).toBe(Date.UTC(2030, 0, 1))
  })
})
