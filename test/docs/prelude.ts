/**
 * The names doc examples use without defining them, declared once with real types, so that the
 * examples type-check as written (docs/conventions.md, Code). Type-checked only, never run.
 */
import type { Context } from 'hono'
import { Hono } from 'hono'
import type { Kysely } from 'kysely'
import type { NodePgDatabase } from 'drizzle-orm/node-postgres'
import { integer, pgTable } from 'drizzle-orm/pg-core'
import type pg from 'pg'
import type { DataSource } from 'typeorm'
import type { Engine, Execution, StoredResponse } from '../../src/index.js'
import type { PostgresStore, Queryable } from '../../src/store/postgres/index.js'

const _ordersTable = pgTable('orders', { id: integer('id').primaryKey() })
const _honoApp = new Hono()

declare global {
  var engine: Engine<Queryable>
  var store: PostgresStore
  var pool: pg.Pool
  var execution: Execution<Queryable>
  var response: StoredResponse
  var fingerprint: string
  var body: Uint8Array
  var id: string
  var req: { headers: Record<string, string | undefined> }
  var provider: { charge(input: unknown, idempotencyKey: string): Promise<{ id: string; amount: number }> }
  var mailer: { send(message: { to: string; charge: { id: string } }): Promise<void> }
  var customer: string
  var charge: { id: string }
  var log: { warn(message: string): void }
  var kysely: Kysely<{ orders: { id: number } }>
  var db: NodePgDatabase
  var orders: typeof _ordersTable
  var dataSource: DataSource
  var app: typeof _honoApp
  var scope: (c: Context) => string | undefined
}
