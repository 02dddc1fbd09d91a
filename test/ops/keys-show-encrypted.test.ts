import { randomBytes, randomUUID } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, keyTable } from '../helpers/engine.js'
import { inspectKey } from '../../src/ops/index.js'

// `oncely keys show` on a row encrypted at rest (issue 23): decrypted with the keys given by flag
// or environment, and a clear message (exit 1) when none was given or the key id is unknown.
const keyA = randomBytes(32).toString('base64')
const keyB = randomBytes(32).toString('base64')
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: {} })
let db: TestDatabase
let env: Record<string, string>
beforeAll(async () => {
  db = await createTestDatabase()
  env = { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema, ONCELY_ENCRYPTION_KEYS: '' }
  const { engine } = engineOn(db, { encryption: { keys: { A: keyA }, current: 'A' } })
  await engine.run({ scope: '7', key: 'sealed-1', fingerprint }, async (execution) => {
    await execution.step('charge', () => ({ providerCharge: 'pch_hidden' }))
    return jsonResponse(201, '{"id":"ch_hidden"}')
  })
})
afterAll(async () => {
  await db.close()
})

describe('oncely keys show, encrypted', () => {
  it('decrypts with --encryption-keys or ONCELY_ENCRYPTION_KEYS; says which key id is missing otherwise', { timeout: 120_000 }, async () => {
    const [byFlag, byEnv, none, unknown] = await Promise.all([
      runCli(['keys', 'show', '7', 'sealed-1', '--encryption-keys', `A:${keyA}`], env),
      runCli(['keys', 'show', '7', 'sealed-1', '--json'], { ...env, ONCELY_ENCRYPTION_KEYS: `B:${keyB},A:${keyA}` }),
      runCli(['keys', 'show', '7', 'sealed-1'], env),
      runCli(['keys', 'show', '7', 'sealed-1'], { ...env, ONCELY_ENCRYPTION_KEYS: `B:${keyB}` }),
    ])
    expect(byFlag.code).toBe(0)
    expect(byFlag.stdout).toContain('{"id":"ch_hidden"}')
    expect(byFlag.stdout).toContain('{"providerCharge":"pch_hidden"}')
    expect(byFlag.stdout).toMatch(/encrypted +step:charge under key id "A", response under key id "A"/)
    expect(byEnv.code).toBe(0)
    const details = JSON.parse(byEnv.stdout) as { response: { body: string }; steps: Array<{ result: unknown }>; encrypted: Array<{ opened: boolean }> }
    expect(details.response.body).toBe('{"id":"ch_hidden"}')
    expect(details.steps[0]?.result).toEqual({ providerCharge: 'pch_hidden' })
    expect(details.encrypted.every((field) => field.opened)).toBe(true)

    expect(none.code).toBe(1)
    expect(none.stdout).not.toContain('hidden')
    expect(none.stdout).toContain('(encrypted under key id "A", not decrypted)')
    expect(none.stderr).toMatch(/the response is encrypted under key id "A" and was not decrypted: .*no encryption keys are configured \(give the keys with --encryption-keys or ONCELY_ENCRYPTION_KEYS\)/)
    expect(unknown.code).toBe(1)
    expect(unknown.stdout).not.toContain('hidden')
    expect(unknown.stderr).toMatch(/key id "A", which is not among the configured keys \(B\)/)
  })
})

describe('oncely reconcile, encrypted', () => {
  it('with ONCELY_ENCRYPTION_KEYS the hook gets the step results decrypted, and what it stores is encrypted', { timeout: 120_000 }, async () => {
    const encryption = { keys: { A: keyA }, current: 'A' }
    const { store } = engineOn(db, { encryption }).engine.options
    const attempt = await store.claim({ scope: '7', key: 'stuck-sealed', fingerprint, ttlMs: 86_400_000, claimId: randomUUID(), fenceToken: randomUUID() })
    if (attempt.kind !== 'inserted') throw new Error(attempt.kind)
    await store.commitStep({ scope: '7', key: 'stuck-sealed', fenceToken: attempt.claim.fenceToken }, 'charge', { providerCharge: 'pch_reconciled' })
    await ageClaim(db, '7', 'stuck-sealed')
    const dir = await mkdtemp(path.join(tmpdir(), 'oncely-hook-'))
    try {
      const hookFile = path.join(dir, 'hook.mjs')
      await writeFile(hookFile, "export default async (claim) => { if (claim.key === 'stuck-sealed') await claim.fail({ status: 410, headers: [], body: Buffer.from(JSON.stringify(claim.steps)) }) }\n")
      const run = await runCli(['reconcile', '--hook', hookFile, '--older-than-ms', '60000', '--json'], { ...env, IDEMPOTENCY_STALE_AFTER_MS: '60000', RECONCILE_AFTER_MS: '', ONCELY_ENCRYPTION_KEYS: `A:${keyA}` })
      expect(run.code, run.stderr).toBe(0)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
    const details = await inspectKey({ pool: db.pool, schema: db.schema }, { scope: '7', key: 'stuck-sealed', encryption })
    expect(details?.status).toBe('failed')
    expect(details?.response?.body).toBe('{"charge":{"providerCharge":"pch_reconciled"}}')
    const { rows } = await db.pool.query<{ body: Buffer }>(`SELECT response_body AS body FROM ${keyTable(db)} WHERE scope = '7' AND key = 'stuck-sealed'`)
    expect(rows[0]?.body.includes('pch_reconciled')).toBe(false)
  })
})
