// Fastify: charge a card once, however often the request is retried.
import Fastify from 'fastify'
import pg from 'pg'
import { createEngine } from 'oncely'
import { oncelyFastify } from 'oncely/fastify'
import { createPostgresStore, migrate, type Queryable } from 'oncely/postgres'
import { chargeTwiceThenChangeTheAmount, fakeProvider } from './support/demo.js'

// Once per app: request.idempotency's transaction is the PostgreSQL store's.
declare module 'oncely/fastify' {
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

const app = Fastify()
await app.register(oncelyFastify, { engine, scope: (request) => request.headers['x-user-id'] as string | undefined })
app.post<{ Body: { amount: number } }>('/v1/charges', async (request, reply) => {
  const { execution, writeOnCompletion } = request.idempotency!
  // Runs once per key; the provider gets a key derived from the claim, so it dedupes too.
  const charge = await execution.step('charge', ({ providerKey }) => provider.charge(request.body.amount, providerKey))
  // Commits in the transaction that stores the response, or not at all.
  writeOnCompletion(async (tx) => {
    await tx.query({ text: 'INSERT INTO charges (id, amount) VALUES ($1, $2)', values: [charge.id, charge.amount] })
  })
  return reply.code(201).send(charge)
})

await chargeTwiceThenChangeTheAmount(await app.listen({ port: 0, host: '127.0.0.1' }))
// 201 {"id":"ch_1","amount":1000}
// 201 (replayed) {"id":"ch_1","amount":1000}
// 422 https://oncely.dev/problems/idempotency-key-reused
console.log(`provider charges: ${provider.count}, rows: ${(await pool.query('SELECT id FROM charges')).rowCount}`) // provider charges: 1, rows: 1
await app.close()
await pool.end()
