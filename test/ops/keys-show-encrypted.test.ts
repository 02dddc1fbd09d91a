import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse } from '../helpers/engine.js'

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
