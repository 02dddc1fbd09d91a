import 'reflect-metadata'
import { sql as drizzleSql } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/node-postgres'
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'
import postgres from 'postgres'
import { DataSource } from 'typeorm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest, type Execution } from '../../src/index.js'
import { fromDrizzle, fromKysely, fromPostgresJs, fromTypeORM, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE orders (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

/** Runs `write` (a business insert plus the completion) in the library's own transaction. */
type InUserTransaction = (orderId: string, execution: Execution<Queryable>, rollback: boolean) => Promise<void>

class Rollback extends Error {}

const libraries: Record<string, () => { run: InUserTransaction; close: () => Promise<void> }> = {
  'postgres.js': () => {
    const sql = postgres(db.url, { max: 2, onnotice: () => undefined })
    return {
      run: async (orderId, execution, rollback) => {
        await sql.begin(async (trx) => {
          await trx`INSERT INTO orders (id) VALUES (${orderId})`
          await execution.complete(jsonResponse(201, `{"order":"${orderId}"}`), { tx: fromPostgresJs(trx) })
          if (rollback) throw new Rollback()
        })
      },
      close: () => sql.end(),
    }
  },
  Kysely: () => {
    const kysely = new Kysely<{ orders: { id: string } }>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 2 }) }) })
    return {
      run: async (orderId, execution, rollback) => {
        await kysely.transaction().execute(async (trx) => {
          await trx.insertInto('orders').values({ id: orderId }).execute()
          await execution.complete(jsonResponse(201, `{"order":"${orderId}"}`), { tx: fromKysely(trx) })
          if (rollback) throw new Rollback()
        })
      },
      close: () => kysely.destroy(),
    }
  },
  Drizzle: () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 })
    const orm = drizzle(pool)
    return {
      run: async (orderId, execution, rollback) => {
        await orm.transaction(async (tx) => {
          await tx.execute(drizzleSql`INSERT INTO orders (id) VALUES (${orderId})`)
          await execution.complete(jsonResponse(201, `{"order":"${orderId}"}`), { tx: fromDrizzle(tx, drizzleSql) })
          if (rollback) throw new Rollback()
        })
      },
      close: () => pool.end(),
    }
  },
  // Issue 8, path 17: the postgres.js driver reports `count`, not `rowCount`.
  'Drizzle on postgres.js': () => {
    const client = postgres(db.url, { max: 2, onnotice: () => undefined })
    const orm = drizzlePostgresJs(client)
    return {
      run: async (orderId, execution, rollback) => {
        await orm.transaction(async (tx) => {
          await tx.execute(drizzleSql`INSERT INTO orders (id) VALUES (${orderId})`)
          await execution.complete(jsonResponse(201, `{"order":"${orderId}"}`), { tx: fromDrizzle(tx, drizzleSql) })
          if (rollback) throw new Rollback()
        })
      },
      close: () => client.end(),
    }
  },
  TypeORM: () => {
    const source = new DataSource({ type: 'postgres', url: db.url, poolSize: 2 })
    const ready = source.initialize()
    return {
      run: async (orderId, execution, rollback) => {
        await ready
        await source.transaction(async (manager) => {
          await manager.query('INSERT INTO orders (id) VALUES ($1)', [orderId])
          if (!manager.queryRunner) throw new Error('TypeORM gave no query runner')
          await execution.complete(jsonResponse(201, `{"order":"${orderId}"}`), { tx: fromTypeORM(manager.queryRunner) })
          if (rollback) throw new Rollback()
        })
      },
      close: async () => {
        await ready
        await source.destroy()
      },
    }
  },
}

describe.each(Object.keys(libraries))('completion inside a %s transaction', (library) => {
  const fingerprint = fingerprintRequest({ method: 'POST', route: '/orders', body: { library } })

  async function orderExists(id: string): Promise<boolean> {
    return ((await db.pool.query('SELECT 1 FROM orders WHERE id = $1', [id])).rowCount ?? 0) === 1
  }

  it('commits the business row and the completion together', async () => {
    const { run, close } = libraries[library]!()
    const { engine } = engineOn(db)
    const key = `${library}-commit`
    const decision = await engine.begin({ scope: 'u1', key, fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    await run(`${library}-1`, decision.execution, false)
    await close()
    expect(await orderExists(`${library}-1`)).toBe(true)
    const replay = await engine.begin({ scope: 'u1', key, fingerprint })
    expect(replay.kind).toBe('replay')
    if (replay.kind === 'replay') expect(Buffer.from(replay.response.body).toString()).toBe(`{"order":"${library}-1"}`)
  })

  it('rolls both back when the user transaction fails', async () => {
    const { run, close } = libraries[library]!()
    const { engine } = engineOn(db)
    const key = `${library}-rollback`
    const decision = await engine.begin({ scope: 'u1', key, fingerprint })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    await expect(run(`${library}-2`, decision.execution, true)).rejects.toBeInstanceOf(Rollback)
    await close()
    expect(await orderExists(`${library}-2`)).toBe(false)
    const { rows } = await db.pool.query<{ status: string }>(`SELECT status FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`, [key])
    expect(rows[0]?.status).toBe('in_progress')
  })
})
