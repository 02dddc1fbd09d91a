// Hono (on Node): charge a card once, however often the request is retried.
import type { AddressInfo } from 'node:net'
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import pg from 'pg'
import { createEngine } from 'oncely'
import { idempotency, type IdempotencyEnv } from 'oncely/hono'
import { createPostgresStore, migrate, type Queryable } from 'oncely/postgres'
import { chargeTwiceThenChangeTheAmount, fakeProvider } from './support/demo.js'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
const schema = process.env.ONCELY_SCHEMA ?? 'oncely'
await migrate({ pool, schema })
await pool.query('CREATE TABLE IF NOT EXISTS charges (id text PRIMARY KEY, amount integer NOT NULL)')
const engine = createEngine({ store: createPostgresStore({ pool, schema }) })
const provider = fakeProvider()

// IdempotencyEnv<Queryable> types c.get('idempotency'), its transaction included.
const app = new Hono<IdempotencyEnv<Queryable>>()
app.post('/v1/charges', idempotency({ engine, scope: (c) => c.req.header('x-user-id') }), async (c) => {
  const { amount } = await c.req.json<{ amount: number }>()
  const { execution, writeOnCompletion } = c.get('idempotency')!
  // Runs once per key; the provider gets a key derived from the claim, so it dedupes too.
  const charge = await execution.step('charge', ({ providerKey }) => provider.charge(amount, providerKey))
  // Commits in the transaction that stores the response, or not at all.
  writeOnCompletion(async (tx) => {
    await tx.query({ text: 'INSERT INTO charges (id, amount) VALUES ($1, $2)', values: [charge.id, charge.amount] })
  })
  return c.json(charge, 201)
})

const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' })
await new Promise((resolve) => server.once('listening', resolve))
await chargeTwiceThenChangeTheAmount(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
// 201 {"id":"ch_1","amount":1000}
// 201 (replayed) {"id":"ch_1","amount":1000}
// 422 https://oncely.dev/problems/idempotency-key-reused
console.log(`provider charges: ${provider.count}, rows: ${(await pool.query('SELECT id FROM charges')).rowCount}`) // provider charges: 1, rows: 1
server.close()
await pool.end()
