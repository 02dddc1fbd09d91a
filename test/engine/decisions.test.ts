import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, deriveStepKey, fingerprintRequest, isOncelyError } from '../../src/index.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const body = { amount: 1000, currency: 'usd', customer: 'cus_1' }
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body })
const other = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { ...body, amount: 2000 } })

describe('mismatch before replay (Invariant 5)', () => {
  it('beats a replay', async () => {
    const { engine } = engineOn(db)
    await owned(await engine.begin({ scope: 'u1', key: 'mm-replay', fingerprint })).complete(jsonResponse(201, '{}'))
    expect((await engine.begin({ scope: 'u1', key: 'mm-replay', fingerprint: other })).kind).toBe('mismatch')
  })

  it('beats a conflict', async () => {
    const { engine } = engineOn(db)
    const running = owned(await engine.begin({ scope: 'u1', key: 'mm-conflict', fingerprint }))
    expect((await engine.begin({ scope: 'u1', key: 'mm-conflict', fingerprint: other })).kind).toBe('mismatch')
    expect((await engine.begin({ scope: 'u1', key: 'mm-conflict', fingerprint })).kind).toBe('conflict')
    await running.release()
  })

  it('beats a take-over of a stale claim, which stays for the matching retry', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const dead = owned(await engine.begin({ scope: 'u1', key: 'mm-stale', fingerprint }))
    await ageClaim(db, 'u1', 'mm-stale')
    expect((await engine.begin({ scope: 'u1', key: 'mm-stale', fingerprint: other })).kind).toBe('mismatch')
    const taker = owned(await engine.begin({ scope: 'u1', key: 'mm-stale', fingerprint }))
    expect(taker.how).toBe('take-over')
    await taker.release()
    expect(dead.state).toBe('running')
    await expect(dead.release()).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
  })

  it('gives semantically equal bodies written differently the same fingerprint', () => {
    const reordered = JSON.parse('{ "customer" : "cus_1",\n "currency":"usd", "amount": 1000.0 }') as unknown
    expect(fingerprintRequest({ method: 'post', route: '/v1/charges', body: reordered })).toBe(fingerprint)
    expect(fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { ...body, customer: 'cus_2' } })).not.toBe(fingerprint)
    expect(fingerprintRequest({ method: 'POST', route: '/v1/refunds', body })).not.toBe(fingerprint)
    expect(fingerprintRequest({ method: 'POST', route: '/v1/charges', body, query: { expand: 'customer' } })).not.toBe(fingerprint)
  })
})

describe('verbatim replay (Invariant 6)', () => {
  it('returns status, headers and body byte for byte, with the key order a jsonb column would change', async () => {
    const { engine } = engineOn(db)
    // jsonb would store {"a": 2, "b": 1, "c": [3]}: shorter keys first, whitespace gone.
    const text = '{"zeta":1,  "b" : 1, "a":2,"c":[3], "unicode":"caf\\u00e9 ☕"}'
    const headers: [string, string][] = [['content-type', 'application/json; charset=utf-8'], ['x-request-cost', '7'], ['location', '/v1/charges/ch_1']]
    await owned(await engine.begin({ scope: 'u1', key: 'bytes', fingerprint })).complete({ status: 201, headers, body: Buffer.from(text) })
    const replay = await engine.begin({ scope: 'u1', key: 'bytes', fingerprint })
    if (replay.kind !== 'replay') throw new Error(replay.kind)
    expect(Buffer.from(replay.response.body).equals(Buffer.from(text))).toBe(true)
    expect(replay.response.headers).toEqual(headers)
    expect(replay.response.status).toBe(201)
  })

  it('replays arbitrary binary bytes', async () => {
    const { engine } = engineOn(db)
    const bytes = Buffer.from([0, 255, 1, 254, 0x7b, 0x22])
    await owned(await engine.begin({ scope: 'u1', key: 'binary', fingerprint })).complete({ status: 200, headers: [], body: bytes })
    const replay = await engine.begin({ scope: 'u1', key: 'binary', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).equals(bytes)).toBe(true)
  })
})

describe('failures (Invariant 7)', () => {
  it('an error before any step releases the key: the retry runs as new', async () => {
    const { engine } = engineOn(db)
    await expect(engine.run({ scope: 'u1', key: 'fail-early', fingerprint }, async () => { throw new Error('validation') })).rejects.toThrow('validation')
    const { rowCount } = await db.pool.query(`SELECT 1 FROM ${keyTable(db)} WHERE scope = 'u1' AND key = 'fail-early'`)
    expect(rowCount).toBe(0)
    expect((await engine.begin({ scope: 'u1', key: 'fail-early', fingerprint })).kind).toBe('execute')
  })

  it('an error after a step suspends: the retry resumes at once with the same step key and skips committed steps', async () => {
    const { engine } = engineOn(db)
    const keysSeen: string[] = []
    let reserveRuns = 0
    const handler = async (execution: Parameters<Parameters<typeof engine.run>[1]>[0]) => {
      await execution.step('reserve', async () => ++reserveRuns)
      await execution.step('charge', async ({ providerKey }) => {
        keysSeen.push(providerKey)
        if (keysSeen.length === 1) throw new Error('provider unreachable')
        return { id: 'ch_1' }
      })
      return jsonResponse(201, '{"id":"ch_1"}')
    }
    await expect(engine.run({ scope: 'u1', key: 'fail-late', fingerprint }, handler)).rejects.toThrow('provider unreachable')
    const suspended = await db.pool.query<{ fence_token: string | null; recovery_point: string }>(`SELECT fence_token, recovery_point FROM ${keyTable(db)} WHERE key = 'fail-late'`)
    expect(suspended.rows[0]).toEqual({ fence_token: null, recovery_point: 'reserve' })
    const result = await engine.run({ scope: 'u1', key: 'fail-late', fingerprint }, handler)
    expect(result.kind).toBe('executed')
    expect(reserveRuns).toBe(1)
    expect(keysSeen).toHaveLength(2)
    expect(keysSeen[0]).toBe(keysSeen[1])
    expect((await engine.begin({ scope: 'u1', key: 'fail-late', fingerprint })).kind).toBe('replay')
  })

  it("a policy that stores the failure makes it a replayed outcome", async () => {
    const { engine } = engineOn(db)
    const declined = jsonResponse(402, '{"error":"card_declined"}')
    const result = await engine.run(
      { scope: 'u1', key: 'fail-stored', fingerprint },
      async (execution) => {
        await execution.step('charge', async () => ({ declined: true }))
        throw new Error('declined')
      },
      { onFailure: () => ({ action: 'store', response: declined }) },
    )
    expect(result).toMatchObject({ kind: 'executed', response: { status: 402 } })
    const replay = await engine.begin({ scope: 'u1', key: 'fail-stored', fingerprint })
    expect(replay.kind === 'replay' && replay.response.status).toBe(402)
    const { rows } = await db.pool.query<{ status: string }>(`SELECT status FROM ${keyTable(db)} WHERE key = 'fail-stored'`)
    expect(rows[0]?.status).toBe('failed')
  })

  it('a step result that is not JSON data is refused', async () => {
    const { engine } = engineOn(db)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'not-json', fingerprint }))
    await expect(execution.step('bad', async () => 10n)).rejects.toMatchObject({ code: 'ONCELY_STEP_RESULT_NOT_JSON' })
    await execution.release()
  })
})

describe('expiry (Invariant 9)', () => {
  it('an expired key is a new request with a new claim identity, so its step keys are new too', async () => {
    const { engine } = engineOn(db, { ttlMs: 60_000, staleAfterMs: 30_000 })
    const first = owned(await engine.begin({ scope: 'u1', key: 'expired', fingerprint }))
    const firstStepKey = first.stepKey('charge')
    await first.complete(jsonResponse(201, '{"n":1}'))
    await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 second' WHERE key = 'expired'`)
    // Even a different payload is welcome now: the old operation is forgotten.
    const second = owned(await engine.begin({ scope: 'u1', key: 'expired', fingerprint: other }))
    expect(second.how).toBe('reclaimed-expired')
    expect(second.claimId).not.toBe(first.claimId)
    expect(second.stepKey('charge')).not.toBe(firstStepKey)
    await second.release()
  })

  it('derives step keys from scope, key, claim and step, with no collisions between fields', () => {
    const base = { scope: 'u1', key: 'k', claimId: 'c', step: 's' }
    expect(deriveStepKey(base)).toMatch(/^[0-9a-f]{64}$/)
    expect(deriveStepKey(base)).toBe(deriveStepKey({ ...base }))
    expect(deriveStepKey({ ...base, scope: 'u2' })).not.toBe(deriveStepKey(base))
    expect(deriveStepKey({ scope: 'u1k', key: '', claimId: 'c', step: 's' })).not.toBe(deriveStepKey({ scope: 'u1', key: 'k', claimId: 'c', step: 's' }))
  })
})

describe('keys', () => {
  it.each([
    [undefined, false],
    ['', false],
    ['x'.repeat(255), true],
    ['x'.repeat(256), false],
    ['order-42:charge', true],
    ['"8e03978e-40d5-43e8-bc93-6894a57f9324"', true],
    ['"unterminated', false],
    ['"in\\"ner"', true],
    ['"bad"quote"', false],
    ['caf\u00e9', false],
    ['tab\there', false],
    [['a', 'b'], false],
  ])('%j valid: %s', async (key, valid) => {
    const { engine } = engineOn(db)
    const decision = await engine.begin({ scope: 'keys', key, fingerprint })
    expect(decision.kind).toBe(valid ? 'execute' : 'invalid')
    if (decision.kind === 'execute') await decision.execution.release()
    if (decision.kind === 'invalid') expect(decision.reason).toMatch(/Idempotency-Key/)
  })

  it('reads the IETF quoted form as the key inside the quotes', async () => {
    const { engine } = engineOn(db)
    await owned(await engine.begin({ scope: 'u1', key: '"quoted-1"', fingerprint })).complete(jsonResponse(201, '{}'))
    expect((await engine.begin({ scope: 'u1', key: 'quoted-1', fingerprint })).kind).toBe('replay')
  })
})

describe('options', () => {
  const store = () => createPostgresStore({ pool: db.pool, schema: db.schema })
  // One shape for every part's options (src/option-validation.ts): `option NAME RULE; got VALUE`.
  it.each([
    ['ttlMs', { ttlMs: 0 }, 'must be a positive integer', '0'],
    ['staleAfterMs', { staleAfterMs: -1 }, 'must be a positive integer', '-1'],
    ['leaseRenewMs', { staleAfterMs: 1000, leaseRenewMs: 1000 }, 'must be below staleAfterMs (1000)', '1000'],
    ['conflictRetryAfterSeconds', { conflictRetryAfterSeconds: 1.5 }, 'must be a positive integer', '1.5'],
    ['handlerDeadlineMs', { staleAfterMs: 3000, handlerDeadlineMs: 1000 }, 'must be above leaseRenewMs (1000)', '1000'],
    ['claimRetryMs', { claimRetryMs: 0 }, 'must be a positive integer', '0'],
    ['claimRetryMs', { claimRetryMs: Number.NaN }, 'must be a positive integer', 'NaN'],
    ['ttlMs', { ttlMs: '60000' }, 'must be a positive integer', '"60000"'],
  ])('a bad %s (%o) fails at start-up, naming it and its value', (name, options, rule, shown) => {
    let error: unknown
    try {
      createEngine({ store: store(), ...(options as object) })
    } catch (e) {
      error = e
    }
    expect(isOncelyError(error, 'ONCELY_INVALID_OPTION')).toBe(true)
    expect((error as Error).message).toBe(`option ${name} ${rule}; got ${shown}`)
  })

  it('no options, or a store that is not one, fail the same way', () => {
    expect(() => createEngine(null as never)).toThrow('option options must be an object; got null')
    expect(() => createEngine({ store: {} as never })).toThrow('option store must be an IdempotencyStore such as createPostgresStore({ pool }); got {}')
  })

  // Issue 8, path 3: a key that expires before its lease goes stale could expire under its owner.
  it.each([
    [{ ttlMs: 60_000, staleAfterMs: 60_000 }, 60_000, 60_000],
    [{ ttlMs: 1000 }, 1000, 90_000],
    [{ ttlMs: 500, staleAfterMs: 2000, leaseRenewMs: 500 }, 500, 2000],
  ])('a ttlMs not above staleAfterMs (%o) fails at start-up, naming both values', (options, ttlMs, staleAfterMs) => {
    expect(() => createEngine({ store: store(), ...options })).toThrow(`option ttlMs must be above staleAfterMs (${staleAfterMs}); got ${ttlMs}`)
  })

  it('a store without a pool, or a bad schema, fails at start-up', () => {
    expect(() => createPostgresStore({ pool: {} as never })).toThrow(/pool/)
    expect(() => createPostgresStore({ pool: db.pool, schema: '' })).toThrow(/schema/)
    expect(() => createPostgresStore({ pool: db.pool, statementTimeoutMs: 0 })).toThrow(/statementTimeoutMs/)
    expect(() => createPostgresStore({ pool: db.pool, statementTimeoutMs: 1000, lockTimeoutMs: 1000 })).toThrow('option lockTimeoutMs must be below statementTimeoutMs (1000); got 1000')
  })

  it('resolved options are frozen', () => {
    const engine = createEngine({ store: store() })
    expect(Object.isFrozen(engine.options)).toBe(true)
    expect(engine.options).toMatchObject({ ttlMs: 86_400_000, staleAfterMs: 90_000, leaseRenewMs: 30_000, conflictRetryAfterSeconds: 1 })
  })
})

describe('scope (issue 8, path 11)', () => {
  it('a numeric scope is its decimal string: the same operation as the string, derived keys and all', async () => {
    const { engine } = engineOn(db)
    const first = owned(await engine.begin({ scope: 42, key: 'numeric-scope', fingerprint }))
    expect(first.scope).toBe('42')
    await first.step('charge', async ({ providerKey }) => providerKey)
    await first.complete(jsonResponse(201, '{}'))
    expect((await engine.begin({ scope: '42', key: 'numeric-scope', fingerprint })).kind).toBe('replay')
  })

  it.each([[''], [Number.NaN], [null], [{ id: 1 }]])('a scope of %o is refused before anything is claimed', async (scope) => {
    const { engine } = engineOn(db)
    await expect(engine.begin({ scope: scope as string, key: 'bad-scope', fingerprint })).rejects.toMatchObject({ code: 'ONCELY_INVALID_SCOPE' })
    const { rows } = await db.pool.query(`SELECT 1 FROM ${keyTable(db)} WHERE key = 'bad-scope'`)
    expect(rows).toHaveLength(0)
  })
})
