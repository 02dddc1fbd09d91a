import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { providerCharges, startService, type TestProcess } from '../helpers/processes.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { charge, get, isProblem, newUser, post, type Answer } from './support/api.js'
import { startGate, type Gate } from './support/gate.js'
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
const OUTCOME_NOT_KNOWN: Advice = { retry_same_key: true, new_key_safe: false, operation_state: 'unknown' }

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

describe('problems of faults say what is safe', () => {
  let databaseProxy: TcpProxy
  let gate: Gate
  let faulty: TestProcess

  beforeAll(async () => {
    // A second process, on the same database through a proxy the test can cut, calling the
    // provider through a gate that can hold a charge.
    databaseProxy = await startTcpProxy(world.db.url)
    gate = await startGate(world.provider.url)
    faulty = await startService({ databaseUrl: databaseProxy.url, schema: world.db.schema, providerUrl: gate.url })
  })
  afterAll(async () => {
    await faulty?.stop()
    await gate?.close()
    await databaseProxy?.close()
  })

  it('the database away: 503, the outcome not known, so the same key is safe and a new one is not', async () => {
    const user = newUser()
    databaseProxy.cut()
    try {
      const away = await get(faulty.url, `/v1/charges/ch_${'0'.repeat(24)}`, user)
      expect(away.headers.get('retry-after')).toBe('1')
      expect((away.json as { type: string }).type).toBe('https://oncely.dev/problems/service-unavailable')
      expect(adviceOf(away, 503)).toEqual(OUTCOME_NOT_KNOWN)
    } finally {
      databaseProxy.restore()
    }
    expect((await get(faulty.url, `/v1/charges/ch_${'0'.repeat(24)}`, user)).status).toBe(404)
  })

  it('an unexpected fault: 500, the outcome not known', async () => {
    const user = newUser()
    // The database answers, but the service's own table is not where it looks: a fault of no known kind.
    await world.db.pool.query('ALTER TABLE oncely_reference.charges RENAME TO charges_away')
    try {
      const failed = await get(faulty.url, `/v1/charges/ch_${'0'.repeat(24)}`, user)
      expect((failed.json as { type: string }).type).toBe('https://oncely.dev/problems/internal-error')
      expect(adviceOf(failed, 500)).toEqual(OUTCOME_NOT_KNOWN)
    } finally {
      await world.db.pool.query('ALTER TABLE oncely_reference.charges_away RENAME TO charges')
    }
  })

  it('a claim taken over while its handler ran: 409, retry the same key later, a new key is not safe', async () => {
    const user = newUser()
    const held = gate.holdNext()
    const answer = post(faulty.url, { user, key: 'taken-over', body: charge('cus_taken_over') })
    await held.arrived
    // What a take-over does to the row: a new holder's token, so the first holder's next fenced
    // write (the completion, after the provider call) matches nothing (Invariant 3).
    const taken = await world.db.pool.query(`UPDATE "${world.db.schema}".idempotency_key SET fence_token = gen_random_uuid() WHERE scope = $1 AND key = 'taken-over' AND status = 'in_progress'`, [user])
    expect(taken.rowCount).toBe(1)
    held.release()
    const lost = await answer
    expect(lost.headers.get('retry-after')).toBe('1')
    expect((lost.json as { type: string }).type).toBe('https://oncely.dev/problems/idempotency-key-in-use')
    expect(adviceOf(lost, 409)).toEqual({ retry_same_key: true, new_key_safe: false, operation_state: 'running' })
  })
})
