// Express: charge a card once, however often the request is retried.
import type { AddressInfo } from 'node:net'
import express from 'express'
import pg from 'pg'
import { createEngine } from 'oncely'
import { idempotency } from 'oncely/express'
import { createPostgresStore, migrate, type Queryable } from 'oncely/postgres'
import { chargeTwiceThenChangeTheAmount, fakeProvider } from './support/demo.js'

// Once per app: req.idempotency's transaction is the PostgreSQL store's.
declare module 'oncely/express' {
  interface IdempotencyRegister {
    tx: Queryable
  }
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
const schema = process.env.ONCELY_SCHEMA ?? 'oncely'
await migrate({ pool, schema })
await pool.query('CREATE TABLE IF NOT EXISTS charges (id text PRIMARY KEY, amount integer NOT NULL)')
const engine = createEngine({ store: createPostgresStore({ pool, schema }) })
const provider = fakeProvider()

const app = express()
// The body parser first, so the guard fingerprints the body.
app.post('/v1/charges', express.json(), idempotency({ engine, scope: (req) => req.get('x-user-id') }), async (req, res) => {
  const { amount } = req.body as { amount: number }
  const { execution, writeOnCompletion } = req.idempotency!
  // Runs once per key; the provider gets a key derived from the claim, so it dedupes too.
  const charge = await execution.step('charge', ({ providerKey }) => provider.charge(amount, providerKey))
  // Commits in the transaction that stores the response, or not at all.
  writeOnCompletion(async (tx) => {
    await tx.query({ text: 'INSERT INTO charges (id, amount) VALUES ($1, $2)', values: [charge.id, charge.amount] })
  })
  res.status(201).json(charge)
})

const server = app.listen(0)
await new Promise((resolve) => server.once('listening', resolve))
await chargeTwiceThenChangeTheAmount(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
// 201 {"id":"ch_1","amount":1000}
// 201 (replayed) {"id":"ch_1","amount":1000}
// 422 https://oncely.dev/problems/idempotency-key-reused
console.log(`provider charges: ${provider.count}, rows: ${(await pool.query('SELECT id FROM charges')).rowCount}`) // provider charges: 1, rows: 1
server.close()
await pool.end()
