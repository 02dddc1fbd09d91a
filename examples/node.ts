// node:http: charge a card once, however often the request is retried.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import pg from 'pg'
import { createEngine } from 'oncely'
import { withIdempotency } from 'oncely/node'
import { createPostgresStore, migrate, type Queryable } from 'oncely/postgres'
import { chargeTwiceThenChangeTheAmount, fakeProvider } from './support/demo.js'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
const schema = process.env.ONCELY_SCHEMA ?? 'oncely'
await migrate({ pool, schema })
await pool.query('CREATE TABLE IF NOT EXISTS charges (id text PRIMARY KEY, amount integer NOT NULL)')
const engine = createEngine({ store: createPostgresStore({ pool, schema }) })
const provider = fakeProvider()

// The adapter reads the body (bounded) and passes it, parsed, with the idempotency context.
const handler = withIdempotency<Queryable>({ engine, scope: (req) => req.headers['x-user-id'] as string | undefined }, async (req, res, { body, idempotency }) => {
  if (req.method !== 'POST' || req.url !== '/v1/charges') return void res.writeHead(404).end()
  const { execution, writeOnCompletion } = idempotency!
  // Runs once per key; the provider gets a key derived from the claim, so it dedupes too.
  const charge = await execution.step('charge', ({ providerKey }) => provider.charge((body as { amount: number }).amount, providerKey))
  // Commits in the transaction that stores the response, or not at all.
  writeOnCompletion(async (tx) => {
    await tx.query({ text: 'INSERT INTO charges (id, amount) VALUES ($1, $2)', values: [charge.id, charge.amount] })
  })
  res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify(charge))
})

const server = createServer(handler).listen(0, '127.0.0.1')
await new Promise((resolve) => server.once('listening', resolve))
await chargeTwiceThenChangeTheAmount(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
// 201 {"id":"ch_1","amount":1000}
// 201 (replayed) {"id":"ch_1","amount":1000}
// 422 https://oncely.dev/problems/idempotency-key-reused
console.log(`provider charges: ${provider.count}, rows: ${(await pool.query('SELECT id FROM charges')).rowCount}`) // provider charges: 1, rows: 1
server.close()
await pool.end()
