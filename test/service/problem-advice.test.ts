import { describe, expect, it } from 'vitest'
import { providerCharges } from '../helpers/processes.js'
import { charge, get, isProblem, newUser, post, type Answer } from './support/api.js'
import { useService } from './support/service-fixture.js'

// Issue 23: every problem the service answers says what a client may safely do next, truthfully
// for its case, beside the members the contract already names.
const world = useService({ provider: { flakyN: 1 } })

interface Advice {
  retry_same_key: boolean
  new_key_safe: boolean
  operation_state: string
}

/** The answer's advice, after checking it is a problem with the contract's members. */
function adviceOf(answer: Answer, status: number): Advice {
  expect(isProblem(answer, status), answer.text).toBe(true)
  const { retry_same_key, new_key_safe, operation_state } = answer.json as Advice
  return { retry_same_key, new_key_safe, operation_state }
}

const NOTHING_RAN: Advice = { retry_same_key: false, new_key_safe: true, operation_state: 'none' }

async function request(path: string, init: RequestInit): Promise<Answer> {
  const response = await fetch(`${world.api}${path}`, init)
  const text = await response.text()
  return { status: response.status, headers: response.headers, text, json: JSON.parse(text) as unknown }
}

describe('problems say what is safe', () => {
  it('refusals before any claim: a new key is safe, the same request is refused again', async () => {
    const user = newUser()
    expect(adviceOf(await post(world.api, { key: 'k-401' }), 401)).toEqual(NOTHING_RAN)
    expect(adviceOf(await post(world.api, { user, key: 'k-400', body: '{"amount":-1}' }), 400)).toEqual(NOTHING_RAN)
    const big = JSON.stringify({ amount: 1000, currency: 'usd', customer: 'x'.repeat(100 * 1024) })
    expect(adviceOf(await post(world.api, { user, key: 'k-413', body: big }), 413)).toEqual(NOTHING_RAN)
    expect(adviceOf(await get(world.api, '/v1/nowhere', user), 404)).toEqual(NOTHING_RAN)
    expect(adviceOf(await get(world.api, `/v1/charges/ch_${'0'.repeat(24)}`, user), 404)).toEqual(NOTHING_RAN)
    expect(adviceOf(await request('/v1/charges', { method: 'DELETE', headers: { authorization: `Bearer demo_${user}` } }), 405)).toEqual(NOTHING_RAN)
    // The adapter's own refusal says the same.
    expect(adviceOf(await post(world.api, { user }), 400)).toEqual(NOTHING_RAN)
    // Truthful: the invalid body stored nothing, so its key then charges once.
    expect((await post(world.api, { user, key: 'k-400' })).status).toBe(201)
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
  })

  it('a declined card: stored, so the same key gets it again and a new key is not called safe', async () => {
    const user = newUser()
    const first = await post(world.api, { user, key: 'declined', body: charge('cus_decline_1') })
    expect(adviceOf(first, 402)).toEqual({ retry_same_key: false, new_key_safe: false, operation_state: 'failed' })
    const replay = await post(world.api, { user, key: 'declined', body: charge('cus_decline_1') })
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(replay.text).toBe(first.text)
  })

  it('a provider failure after the charge may have been attempted: retry the same key, never a new one', async () => {
    const user = newUser()
    const failed = await post(world.api, { user, key: 'flaky', body: charge('cus_flaky_1') })
    expect(failed.headers.get('retry-after')).toBe('1')
    expect(adviceOf(failed, 503)).toEqual({ retry_same_key: true, new_key_safe: false, operation_state: 'suspended' })
    // The advice holds: the same key resumes with the same provider key and charges once.
    expect((await post(world.api, { user, key: 'flaky', body: charge('cus_flaky_1') })).status).toBe(201)
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
  })
})
