import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { Hono } from 'hono'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, isOncelyError, type EncryptionOptions, type StoredResponse } from '../../src/index.js'
import { idempotency, type IdempotencyEnv } from '../../src/adapters/hono.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { keyTable } from '../helpers/engine.js'

// Encryption at rest (issue 23, point 5) on the real PostgreSQL: the rows hold no response or
// step result in clear, old keys still open old rows after a rotation, and a row that does not
// decrypt is a clear error (500 through an adapter), never its ciphertext replayed nor a re-run.
const keyA = randomBytes(32)
const keyB = randomBytes(32)
const onlyA: EncryptionOptions = { keys: { A: keyA }, current: 'A' }
const rotated: EncryptionOptions = { keys: { A: keyA.toString('base64'), B: keyB }, current: 'B' }
const print = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const SECRET_BODY = '{"id":"ch_secret_4242","card":"4242424242424242"}'
const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json'], ['location', '/v1/charges/ch_secret_4242']], body: Buffer.from(SECRET_BODY) }

describe('encryption at rest', () => {
  let db: TestDatabase
  let n = 0
  const newKey = () => `enc-${n++}`
  const engineWith = (encryption?: EncryptionOptions) =>
    createEngine<Queryable>({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), ...(encryption === undefined ? {} : { encryption }) })
  const rawRow = async (key: string) =>
    (await db.pool.query<{ response_headers: unknown; response_body: Buffer; step_results: Record<string, unknown> }>(`SELECT response_headers, response_body, step_results FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`, [key])).rows[0]
  const completeWithStep = async (encryption: EncryptionOptions | undefined, key: string) => {
    const decision = await engineWith(encryption).begin({ scope: 'u1', key, fingerprint: print })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    await decision.execution.step('charge', () => ({ providerCharge: 'pch_secret_77' }))
    await decision.execution.complete(response)
  }
  const replayed = async (encryption: EncryptionOptions | undefined, key: string) => {
    const decision = await engineWith(encryption).begin({ scope: 'u1', key, fingerprint: print })
    if (decision.kind !== 'replay') throw new Error(decision.kind)
    return decision.response
  }

  beforeAll(async () => {
    db = await createTestDatabase()
  })
  afterAll(async () => {
    await db?.close()
  })

  it('stores neither the body, the headers nor a step result in clear, and replays them verbatim', async () => {
    const key = newKey()
    await completeWithStep(onlyA, key)
    const row = await rawRow(key)
    expect(row?.response_body.includes('ch_secret_4242')).toBe(false)
    expect(row?.response_headers).toEqual([])
    expect(JSON.stringify(row?.step_results)).not.toContain('pch_secret_77')
    const replay = await replayed(onlyA, key)
    expect(replay.status).toBe(201)
    expect(replay.headers).toEqual(response.headers)
    expect(Buffer.from(replay.body).toString()).toBe(SECRET_BODY)
    expect((await engineWith(onlyA).inspect({ scope: 'u1', key }))?.steps.charge).toEqual({ providerCharge: 'pch_secret_77' })
  })

  it('a step result sealed before a take-over opens for the new owner', async () => {
    const key = newKey()
    const first = await engineWith(onlyA).begin({ scope: 'u1', key, fingerprint: print })
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.step('charge', () => ({ providerCharge: 'pch_resumed' }))
    await first.execution.suspend()
    const next = await engineWith(onlyA).begin({ scope: 'u1', key, fingerprint: print })
    if (next.kind !== 'execute') throw new Error(next.kind)
    expect(next.execution.how).toBe('take-over')
    let ran = false
    const result = await next.execution.step('charge', () => ((ran = true), { providerCharge: 'again' }))
    expect(ran).toBe(false)
    expect(result).toEqual({ providerCharge: 'pch_resumed' })
    await next.execution.complete(response)
  })

  it('with encryption off, a sealed step result is refused before the take-over, never run on as garbage', async () => {
    const key = newKey()
    const first = await engineWith(onlyA).begin({ scope: 'u1', key, fingerprint: print })
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.step('charge', () => ({ providerCharge: 'pch_kept' }))
    await first.execution.suspend()
    await expect(engineWith(undefined).begin({ scope: 'u1', key, fingerprint: print })).rejects.toThrow(/the step:charge of key .* is encrypted \(key id "A"\) and no encryption keys are configured/)
    // Nothing changed: the claim is still there to resume with the key.
    const next = await engineWith(onlyA).begin({ scope: 'u1', key, fingerprint: print })
    if (next.kind !== 'execute') throw new Error(next.kind)
    expect(next.execution.how).toBe('take-over')
    expect(await next.execution.step('charge', () => ({ providerCharge: 'again' }))).toEqual({ providerCharge: 'pch_kept' })
    await next.execution.complete(response)
  })

  it('with encryption off, a claim holding one clear and one sealed step result is refused before the take-over as well', async () => {
    const key = newKey()
    // A step in clear (encryption was off), then one sealed after a take-over with encryption on.
    const first = await engineWith(undefined).begin({ scope: 'u1', key, fingerprint: print })
    if (first.kind !== 'execute') throw new Error(first.kind)
    await first.execution.step('quote', () => ({ quote: 'q_clear' }))
    await first.execution.suspend()
    const second = await engineWith(onlyA).begin({ scope: 'u1', key, fingerprint: print })
    if (second.kind !== 'execute') throw new Error(second.kind)
    expect(second.execution.how).toBe('take-over')
    await second.execution.step('charge', () => ({ providerCharge: 'pch_mixed' }))
    await second.execution.suspend()
    await expect(engineWith(undefined).begin({ scope: 'u1', key, fingerprint: print })).rejects.toThrow(/the step:charge of key .* is encrypted \(key id "A"\) and no encryption keys are configured/)
    const next = await engineWith(onlyA).begin({ scope: 'u1', key, fingerprint: print })
    if (next.kind !== 'execute') throw new Error(next.kind)
    expect(await next.execution.step('quote', () => ({ quote: 'again' }))).toEqual({ quote: 'q_clear' })
    expect(await next.execution.step('charge', () => ({ providerCharge: 'again' }))).toEqual({ providerCharge: 'pch_mixed' })
    await next.execution.complete(response)
  })

  it('after a rotation, rows under the old key still replay and new rows carry the new key id', async () => {
    const old = newKey()
    await completeWithStep(onlyA, old)
    expect(Buffer.from((await replayed(rotated, old)).body).toString()).toBe(SECRET_BODY)
    const fresh = newKey()
    await completeWithStep(rotated, fresh)
    const row = await rawRow(fresh)
    // The envelope: 4 magic bytes, the id's length, the id.
    expect(row?.response_body.subarray(4, 6)).toEqual(Buffer.from([1, 0x42]))
    expect(String(row?.step_results.charge)).toMatch(/^oncely:enc:v1:B:/)
    // Only A: B's rows do not open, with a clear error naming the key id.
    await expect(replayed(onlyA, fresh)).rejects.toThrow(/key id "B", which is not among the configured keys \(A\)/)
  })

  it('a row stored in clear before encryption was on is still replayed', async () => {
    const key = newKey()
    await completeWithStep(undefined, key)
    expect(Buffer.from((await replayed(onlyA, key)).body).toString()).toBe(SECRET_BODY)
  })

  it('a tampered byte, a ciphertext copied from another row, a wrong key or no key at all: a clear error, never garbage', async () => {
    const key = newKey()
    await completeWithStep(onlyA, key)
    const table = keyTable(db)
    // The last byte flipped (XOR 0xff), never set: set to 0xff it was unchanged whenever it already was (1 run in 256).
    await db.pool.query(`UPDATE ${table} SET response_body = set_byte(response_body, length(response_body) - 1, get_byte(response_body, length(response_body) - 1) # 255) WHERE scope = 'u1' AND key = $1`, [key])
    const tampered = await replayed(onlyA, key).catch((error: unknown) => error)
    expect(isOncelyError(tampered, 'ONCELY_DECRYPTION_FAILED')).toBe(true)
    expect(String(tampered)).toMatch(/does not decrypt under key id "A"/)

    const source = newKey()
    const copy = newKey()
    await completeWithStep(onlyA, source)
    await completeWithStep(onlyA, copy)
    await db.pool.query(`UPDATE ${table} SET response_body = (SELECT response_body FROM ${table} WHERE scope = 'u1' AND key = $1) WHERE scope = 'u1' AND key = $2`, [source, copy])
    await expect(replayed(onlyA, copy)).rejects.toThrow(/does not decrypt/)

    await expect(replayed({ keys: { A: randomBytes(32) }, current: 'A' }, source)).rejects.toThrow(/does not decrypt under key id "A"/)
    await expect(replayed(undefined, source)).rejects.toThrow(/is encrypted \(key id "A"\) and no encryption keys are configured/)
  })

  it('through an adapter: a row that does not decrypt answers 500 record-unreadable, and the handler never runs again', async () => {
    const key = newKey()
    let runs = 0
    const app = (encryption: EncryptionOptions) =>
      new Hono<IdempotencyEnv<Queryable>>()
        .use('/v1/*', idempotency({ engine: engineWith(encryption), scope: () => 'u1' }))
        .post('/v1/charges', (c) => ((runs += 1), c.json({ id: 'ch_secret_4242' }, 201)))
    const send = (encryption: EncryptionOptions) =>
      app(encryption).request('/v1/charges', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"amount":1000}' })
    expect((await send(onlyA)).status).toBe(201)
    const replay = await send(rotated)
    expect(replay.status).toBe(201)
    expect(await replay.text()).toContain('ch_secret_4242')
    const refused = await send({ keys: { B: keyB }, current: 'B' })
    expect(refused.status).toBe(500)
    const problem = (await refused.json()) as { type: string; retryable: boolean }
    expect(problem.type).toBe('https://oncely.dev/problems/record-unreadable')
    expect(problem.retryable).toBe(false)
    expect(runs).toBe(1)
  })

  it('a bad key is refused at start-up, naming the option', () => {
    expect(() => engineWith({ keys: { A: randomBytes(16) }, current: 'A' })).toThrow(/option encryption.keys.A must be 32 bytes/)
    expect(() => engineWith({ keys: { A: keyA }, current: 'B' })).toThrow(/option encryption.current/)
    expect(() => engineWith({ keys: { 'a:b': keyA }, current: 'a:b' })).toThrow(/option encryption.keys/)
  })
})

describe('the encryption example', () => {
  it('runs and prints what its comments say, and docs/encryption.md shows it exactly', { timeout: 60_000 }, async () => {
    const own = await createTestDatabase()
    try {
      const file = fileURLToPath(new URL('../../examples/encryption.ts', import.meta.url))
      const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', file], { env: { ...process.env, DATABASE_URL: own.url, ONCELY_SCHEMA: own.schema } })
      const source = await readFile(file, 'utf8')
      expect(stdout.trim().split('\n')).toEqual([...source.matchAll(/\/\/ ((?:executed|replay|encrypted|in clear).*)$/gm)].map((match) => match[1]))
      expect(stdout).toContain('encrypted\n')
      expect(await readFile(new URL('../../docs/encryption.md', import.meta.url), 'utf8')).toContain('```ts\n' + source + '```')
    } finally {
      await own.close()
    }
  })
})
