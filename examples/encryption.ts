// Stored responses and step results encrypted at rest, and a key rotated.
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { createEngine, fingerprintRequest, parseEncryptionKeys, type Engine } from 'oncely'
import { createPostgresStore, migrate } from 'oncely/postgres'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
const schema = process.env.ONCELY_SCHEMA ?? 'oncely'
await migrate({ pool, schema })
const store = createPostgresStore({ pool, schema })
// Two 32-byte keys, as an operator would keep them in the environment: `id:base64,id:base64`.
const key2025 = randomBytes(32).toString('base64')
const key2026 = randomBytes(32).toString('base64')

async function charge(engine: Engine, key: string) {
  const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
  const result = await engine.run({ scope: '42', key, fingerprint }, async (execution) => {
    const charge = await execution.step('charge', () => ({ id: 'ch_1', card: '4242' }))
    return { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from(JSON.stringify(charge)) }
  })
  return result.kind === 'executed' || result.kind === 'replay' ? `${result.kind} ${Buffer.from(result.response.body).toString()}` : result.kind
}
const rawBody = async (key: string) => {
  const { rows } = await pool.query<{ body: Buffer }>(`SELECT response_body AS body FROM "${schema.replaceAll('"', '""')}".idempotency_key WHERE scope = '42' AND key = $1`, [key])
  return rows[0]?.body.includes('4242') ? 'in clear' : 'encrypted'
}

const key = `order-${randomBytes(4).toString('hex')}`
const before = createEngine({ store, encryption: parseEncryptionKeys(`k2025:${key2025}`) })
console.log(await charge(before, key)) // executed {"id":"ch_1","card":"4242"}
console.log(await rawBody(key)) // encrypted

// Rotation: the new key is current, the old one stays listed so older rows still open.
const after = createEngine({ store, encryption: parseEncryptionKeys(`k2025:${key2025},k2026:${key2026}`, 'k2026') })
console.log(await charge(after, key)) // replay {"id":"ch_1","card":"4242"}
await pool.end()
