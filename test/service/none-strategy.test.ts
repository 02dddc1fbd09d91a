import { describe, expect, it } from 'vitest'
import { providerCharges } from '../helpers/processes.js'
import { charge, get, newUser, post } from './support/api.js'
import { useService } from './support/service-fixture.js'

// IDEMPOTENCY_STRATEGY=none is the benchmarks' baseline: it must do the same business work as
// the default route (a provider charge, a charge row), and nothing that guards a key.
const world = useService({ service: { strategy: 'none' } })

describe('IDEMPOTENCY_STRATEGY=none', () => {
  it('charges at the provider and stores the charge row, as the guarded route does', async () => {
    const user = newUser()
    const answer = await post(world.service.url, { user, key: 'none-1', body: charge('cus_none', 4200) })
    expect(answer.status).toBe(201)
    const created = answer.json as { id: string; amount: number }
    expect(created).toMatchObject({ object: 'charge', amount: 4200, customer: 'cus_none', status: 'succeeded' })
    const stored = await get(world.service.url, `/v1/charges/${created.id}`, user)
    expect(stored.status).toBe(200)
    expect(stored.json).toEqual(created)
  })

  it('guards nothing: the same key twice charges twice, and neither answer is a replay', async () => {
    const user = newUser()
    const first = await post(world.service.url, { user, key: 'none-2' })
    const again = await post(world.service.url, { user, key: 'none-2' })
    expect([first.status, again.status]).toEqual([201, 201])
    expect(again.headers.get('idempotent-replayed')).toBeNull()
    expect(again.text).not.toBe(first.text)
    // With its key the provider would have answered the second call with the first charge.
    expect(await providerCharges(world.provider.url, user)).toHaveLength(2)
  })
})
