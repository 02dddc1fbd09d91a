// Charge a card once, however often the request is retried.
import pg from 'pg'
import { createEngine, fingerprintRequest } from 'oncely'
import { createPostgresStore, migrate } from 'oncely/postgres'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
const schema = process.env.ONCELY_SCHEMA ?? 'oncely'
await migrate({ pool, schema })
await pool.query('CREATE TABLE IF NOT EXISTS example_charges (id text PRIMARY KEY, amount integer NOT NULL)')
const engine = createEngine({ store: createPostgresStore({ pool, schema }) })

// Stands in for a payment provider that dedupes on its own Idempotency-Key.
const providerCharges = new Map<string, { id: string; amount: number }>()
async function providerCharge(amount: number, idempotencyKey: string) {
  const existing = providerCharges.get(idempotencyKey)
  if (existing) return existing
  const charge = { id: `ch_${providerCharges.size + 1}`, amount }
  providerCharges.set(idempotencyKey, charge)
  return charge
}

async function handle(userId: string, idempotencyKey: string, body: { amount: number }) {
  const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body })
  const result = await engine.run({ scope: userId, key: idempotencyKey, fingerprint }, async (execution) => {
    // Runs outside any transaction, with a key derived from the claim: the provider dedupes too.
    const charge = await execution.step('charge', ({ providerKey }) => providerCharge(body.amount, providerKey))
    const response = { status: 201, headers: [['content-type', 'application/json']] as [string, string][], body: Buffer.from(JSON.stringify(charge)) }
    // The business row and the stored response commit in one transaction.
    await execution.completeInTransaction(async (tx) => {
      await tx.query({ text: 'INSERT INTO example_charges (id, amount) VALUES ($1, $2)', values: [charge.id, charge.amount] })
      return { response, value: charge }
    })
    return response
  })
  return result.kind === 'executed' || result.kind === 'replay' ? `${result.kind} ${result.response.status} ${Buffer.from(result.response.body).toString()}` : result.kind
}

const key = `order-${Date.now()}`
console.log(await handle('42', key, { amount: 1000 })) // executed 201 {"id":"ch_1","amount":1000}
console.log(await handle('42', key, { amount: 1000 })) // replay 201 {"id":"ch_1","amount":1000}
console.log(await handle('42', key, { amount: 9999 })) // mismatch
console.log(`provider charges: ${providerCharges.size}`) // provider charges: 1
await pool.end()
