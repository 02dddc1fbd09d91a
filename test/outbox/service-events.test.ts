import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startProvider, startService, type ServiceOptions, type TestProcess } from '../helpers/processes.js'
import { charge, newUser, post } from '../service/support/api.js'
import { waitUntil } from './support/wait.js'

// The reference service's side of "After a charge": the event in the completion transaction, and
// the receipt sent at most once across a crash at every chaos point.
const STALE_AFTER_MS = 1500
let db: TestDatabase
let provider: TestProcess
let service: TestProcess
let options: ServiceOptions

beforeAll(async () => {
  db = await createTestDatabase()
  provider = await startProvider()
  options = { databaseUrl: db.url, schema: db.schema, providerUrl: provider.url, staleAfterMs: STALE_AFTER_MS, chaos: true, env: { ONCELY_RELAY: '0' } }
  service = await startService(options)
})
afterAll(async () => {
  await service?.stop()
  await provider?.stop()
  await db?.close()
})

const outboxRows = async (chargeId: string) =>
  (await db.pool.query<{ type: string; payload: string; ordering_key: string }>(`SELECT type, payload, ordering_key FROM "${db.schema.replaceAll('"', '""')}".outbox WHERE payload LIKE $1`, [`%${chargeId}%`])).rows

const receiptsFor = async (chargeId: string) => {
  const { data } = (await (await fetch(`${provider.url}/v1/messages`)).json()) as { data: Array<{ customer: string; charge: { id: string } }> }
  return data.filter((message) => message.charge.id === chargeId)
}

describe('a 201 writes charge.succeeded in its completion transaction', () => {
  it('one event, the charge exactly as the 201 body, ordered by customer; a replay adds none', async () => {
    const user = newUser()
    const first = await post(service.url, { user, key: 'event-1', body: charge('cus_events') })
    expect(first.status).toBe(201)
    const id = (first.json as { id: string }).id
    expect(await outboxRows(id)).toEqual([{ type: 'charge.succeeded', payload: `{"charge":${first.text}}`, ordering_key: 'cus_events' }])
    expect((await post(service.url, { user, key: 'event-1', body: charge('cus_events') })).status).toBe(201)
    expect(await outboxRows(id)).toHaveLength(1)
  })

  it('a declined charge (402) writes no event and sends no receipt', async () => {
    const before = (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema.replaceAll('"', '""')}".outbox`)).rows[0] as { n: number }
    expect((await post(service.url, { user: newUser(), key: 'declined', body: charge('cus_decline_x') })).status).toBe(402)
    const after = (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema.replaceAll('"', '""')}".outbox`)).rows[0] as { n: number }
    expect(after.n).toBe(before.n)
  })
})

describe.each(['after-claim', 'after-provider', 'after-receipt', 'after-complete'] as const)('the receipt, with the API SIGKILLed %s', (point) => {
  it('is sent once or never, never twice; the charge has one event', { timeout: 90_000 }, async () => {
    const user = newUser()
    const key = `receipt-${point}`
    const doomed = await startService(options)
    const crashed = await post(doomed.url, { user, key, headers: { 'x-chaos-crash': point } }).catch((error: unknown) => error)
    expect(crashed).toBeInstanceOf(Error)
    expect((await doomed.exited).signal).toBe('SIGKILL')
    let done = await post(service.url, { user, key })
    await waitUntil('the crashed claim is taken over', async () => {
      done = await post(service.url, { user, key })
      return done.status !== 409
    })
    expect(done.status).toBe(201)
    const id = (done.json as { id: string }).id
    const receipts = await receiptsFor(id)
    // Each of these points falls before the receipt is recorded, or after it was sent: one.
    expect(receipts).toHaveLength(1)
    expect(await outboxRows(id)).toHaveLength(1)
  })
})
