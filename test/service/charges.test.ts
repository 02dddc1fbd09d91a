import { describe, expect, it } from 'vitest'
import { providerCharges, startService } from '../helpers/processes.js'
import { charge, get, isProblem, newUser, post } from './support/api.js'
import { useService } from './support/service-fixture.js'

// Every row of the POST /v1/charges table of docs/reference-service.md, over HTTP, against the
// real service and provider processes.
const world = useService({ gate: true, service: { staleAfterMs: 10_000 } })

describe('POST /v1/charges', () => {
  it('first request: calls the provider once with a derived key and answers 201 with the charge', async () => {
    const user = newUser()
    const keysBefore = world.gate.keys.length
    const answer = await post(world.api, { user, key: 'first-1', body: charge('cus_first', 2500) })
    expect(answer.status).toBe(201)
    expect(answer.headers.get('content-type')).toMatch(/^application\/json/)
    expect(answer.headers.get('idempotent-replayed')).toBeNull()
    expect(answer.json).toMatchObject({ object: 'charge', amount: 2500, currency: 'usd', customer: 'cus_first', status: 'succeeded' })
    expect(world.gate.keys.slice(keysBefore)).toHaveLength(1)
    expect(world.gate.keys.at(-1)).toMatch(/^[0-9a-f]{64}$/)
    expect(world.gate.keys.at(-1)).not.toContain('first-1')
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
  })

  it('the same key and payload after completion: the stored response verbatim, marked as replayed', async () => {
    const user = newUser()
    const first = await post(world.api, { user, key: 'replay-1' })
    const again = await post(world.api, { user, key: 'replay-1' })
    expect(again.status).toBe(first.status)
    expect(again.text).toBe(first.text)
    expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'))
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
  })

  it('a semantically equal payload written differently (key order, whitespace) is a replay', async () => {
    const user = newUser()
    const first = await post(world.api, { user, key: 'equal-1', body: '{"amount":1000,"currency":"usd","customer":"cus_ok"}' })
    const again = await post(world.api, { user, key: 'equal-1', body: '{\n  "customer" : "cus_ok",\n  "currency":"usd", "amount": 1000\n}\n' })
    expect(again.status).toBe(201)
    expect(again.text).toBe(first.text)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    // Without a JSON Content-Type the body is still read as JSON, so it is still the same payload.
    const plain = await post(world.api, { user, key: 'equal-1', body: '{"customer":"cus_ok","amount":1000,"currency":"usd"}', headers: { 'content-type': 'text/plain' } })
    expect(plain.text).toBe(first.text)
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
  })

  it('the same key with a different payload: 422 problem, never a replay', async () => {
    const user = newUser()
    await post(world.api, { user, key: 'mismatch-1', body: charge('cus_ok', 1000) })
    const other = await post(world.api, { user, key: 'mismatch-1', body: charge('cus_ok', 1001) })
    expect(isProblem(other, 422)).toBe(true)
    expect(other.headers.get('idempotent-replayed')).toBeNull()
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
  })

  it('the same key while the first is still running: 409 with Retry-After, then the first finishes', async () => {
    const user = newUser()
    const held = world.gate.holdNext()
    const first = post(world.api, { user, key: 'busy-1' })
    await held.arrived
    const second = await post(world.api, { user, key: 'busy-1' })
    expect(isProblem(second, 409)).toBe(true)
    expect(Number(second.headers.get('retry-after'))).toBeGreaterThan(0)
    held.release()
    expect((await first).status).toBe(201)
    const third = await post(world.api, { user, key: 'busy-1' })
    expect(third.headers.get('idempotent-replayed')).toBe('true')
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
  })

  it('no Idempotency-Key, or a malformed one: 400 problem, nothing stored', async () => {
    const user = newUser()
    expect(isProblem(await post(world.api, { user }), 400)).toBe(true)
    expect(isProblem(await post(world.api, { user, key: '' }), 400)).toBe(true)
    expect(isProblem(await post(world.api, { user, key: 'k'.repeat(256) }), 400)).toBe(true)
    expect(isProblem(await post(world.api, { user, key: 'tab\there' }), 400)).toBe(true)
    expect(await providerCharges(world.provider.url, user)).toHaveLength(0)
    // A key of exactly 255 printable characters is fine.
    expect((await post(world.api, { user, key: '~'.repeat(255) })).status).toBe(201)
  })

  it('an invalid body: 400 problem, nothing stored, so the same key with a corrected body succeeds', async () => {
    const user = newUser()
    const bad = [
      '{"amount":',
      'not json',
      '[]',
      '{"amount":0,"currency":"usd","customer":"cus_ok"}',
      '{"amount":-5,"currency":"usd","customer":"cus_ok"}',
      '{"amount":1.5,"currency":"usd","customer":"cus_ok"}',
      '{"amount":"100","currency":"usd","customer":"cus_ok"}',
      '{"amount":100,"currency":"USD","customer":"cus_ok"}',
      '{"amount":100,"currency":"usd"}',
      '{"amount":100,"currency":"usd","customer":42}',
      '{"amount":100,"currency":"usd","customer":"cus\\u0000ok"}',
    ]
    for (const body of bad) {
      const answer = await post(world.api, { user, key: 'fix-me', body })
      expect(isProblem(answer, 400), body).toBe(true)
    }
    expect(await providerCharges(world.provider.url, user)).toHaveLength(0)
    const fixed = await post(world.api, { user, key: 'fix-me' })
    expect(fixed.status).toBe(201)
    expect(fixed.headers.get('idempotent-replayed')).toBeNull()
  })

  it('the provider declines: 402, stored and replayed, no charge', async () => {
    const user = newUser()
    const first = await post(world.api, { user, key: 'decline-1', body: charge('cus_decline_1') })
    expect(isProblem(first, 402)).toBe(true)
    const again = await post(world.api, { user, key: 'decline-1', body: charge('cus_decline_1') })
    expect(again.status).toBe(402)
    expect(again.text).toBe(first.text)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(await providerCharges(world.provider.url, user)).toHaveLength(0)
  })

  it('the provider fails before charging: 503 with Retry-After, and the retry resumes with the same provider key', async () => {
    const user = newUser()
    const keysBefore = world.gate.keys.length
    const first = await post(world.api, { user, key: 'flaky-1', body: charge('cus_flaky_1') })
    expect(isProblem(first, 503)).toBe(true)
    expect(first.headers.get('retry-after')).toBeTruthy()
    const retry = await post(world.api, { user, key: 'flaky-1', body: charge('cus_flaky_1') })
    expect(retry.status).toBe(201)
    const keys = world.gate.keys.slice(keysBefore)
    expect(keys).toHaveLength(2)
    expect(keys[1]).toBe(keys[0])
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
  })

  it('the provider charges but its answer is lost: 502, and the retry gets the same charge, never a second', async () => {
    const user = newUser()
    world.gate.dropNextAnswer()
    const first = await post(world.api, { user, key: 'lost-1' })
    expect(isProblem(first, 502)).toBe(true)
    expect(first.headers.get('retry-after')).toBeTruthy()
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
    const retry = await post(world.api, { user, key: 'lost-1' })
    expect(retry.status).toBe(201)
    const charges = await providerCharges(world.provider.url, user)
    expect(charges).toHaveLength(1)
    expect((retry.json as { provider_charge: string }).provider_charge).toBe(charges[0]?.id)
  })
})

describe('authentication and scoping', () => {
  it('anything but Bearer demo_<positive integer> is 401', async () => {
    for (const authorization of [undefined, 'Bearer demo_0', 'Bearer demo_-1', 'Bearer demo_abc', 'Bearer demo_', 'Basic ZGVtbzox', 'Bearer 1']) {
      const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': 'auth-1' }
      if (authorization) headers.authorization = authorization
      const response = await fetch(`${world.api}/v1/charges`, { method: 'POST', headers, body: charge() })
      expect(response.status, String(authorization)).toBe(401)
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/)
      await response.arrayBuffer()
    }
  })

  it('the same key from two users is two operations; a charge is visible only to its user', async () => {
    const alice = newUser()
    const bob = newUser()
    const a = await post(world.api, { user: alice, key: 'shared-key' })
    const b = await post(world.api, { user: bob, key: 'shared-key', body: charge('cus_ok', 777) })
    expect(a.status).toBe(201)
    expect(b.status).toBe(201)
    expect(b.headers.get('idempotent-replayed')).toBeNull()
    expect(b.text).not.toBe(a.text)
    const id = (a.json as { id: string }).id
    const own = await get(world.api, `/v1/charges/${id}`, alice)
    expect(own.status).toBe(200)
    expect(own.json).toEqual(a.json)
    expect(isProblem(await get(world.api, `/v1/charges/${id}`, bob), 404)).toBe(true)
    expect(isProblem(await get(world.api, '/v1/charges/ch_nothing%00here', alice), 404)).toBe(true)
    expect((await get(world.api, `/v1/charges/${id}`)).status).toBe(401)
  })
})

describe('routing', () => {
  it('a known path with another method is 405 with Allow; an unknown path is 404', async () => {
    const user = newUser()
    for (const [method, path, allow] of [['PUT', '/v1/charges', 'POST'], ['GET', '/v1/charges', 'POST'], ['DELETE', '/v1/charges/ch_x', 'GET, HEAD'], ['POST', '/healthz', 'GET, HEAD']] as const) {
      const response = await fetch(`${world.api}${path}`, { method, headers: { authorization: `Bearer demo_${user}` } })
      expect(response.status, `${method} ${path}`).toBe(405)
      expect(response.headers.get('allow')).toBe(allow)
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/)
      await response.arrayBuffer()
    }
    expect(isProblem(await get(world.api, '/v1/refunds', user), 404)).toBe(true)
  })
})

describe('health and metrics', () => {
  it('GET /healthz is 200 while the database answers', async () => {
    const health = await get(world.api, '/healthz')
    expect(health.status).toBe(200)
  })

  it('GET /metrics has requests by outcome, the duration histogram and the stale-claims gauge', async () => {
    const metrics = await get(world.api, '/metrics')
    expect(metrics.status).toBe(200)
    expect(metrics.headers.get('content-type')).toMatch(/^text\/plain/)
    for (const outcome of ['created', 'replayed', 'conflict', 'mismatch', 'invalid', 'failed']) {
      expect(metrics.text).toMatch(new RegExp(`^oncely_requests_total\\{outcome="${outcome}"\\} \\d+`, 'm'))
    }
    expect(metrics.text).toMatch(/^oncely_request_duration_seconds_bucket\{/m)
    expect(metrics.text).toMatch(/^oncely_stale_in_progress_keys \d+/m)
    expect(metrics.text).toMatch(/^oncely_requests_total\{outcome="created"\} [1-9]/m)
  })
})

describe('after IDEMPOTENCY_TTL_MS', () => {
  it('the key is new: a second charge, not a replay', async () => {
    const short = await startService({ databaseUrl: world.db.url, schema: world.db.schema, providerUrl: world.provider.url, ttlMs: 1000, staleAfterMs: 500 })
    try {
      const user = newUser()
      const first = await post(short.url, { user, key: 'ttl-1' })
      expect(first.status).toBe(201)
      // Expiry is the behaviour under test: wait it out.
      await new Promise((resolve) => setTimeout(resolve, 1300))
      const later = await post(short.url, { user, key: 'ttl-1' })
      expect(later.status).toBe(201)
      expect(later.headers.get('idempotent-replayed')).toBeNull()
      expect((later.json as { id: string }).id).not.toBe((first.json as { id: string }).id)
      expect(await providerCharges(world.provider.url, user)).toHaveLength(2)
    } finally {
      await short.stop()
    }
  })
})
