import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { inspectKey } from '../../src/ops/keys.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startCli, startProvider, type TestProcess } from '../helpers/processes.js'
import { deadClaim } from '../ops/support/dead-claim.js'
import { newUser } from '../service/support/api.js'

// `oncely serve --reconcile-after-ms`, as a real process: it overrides RECONCILE_AFTER_MS and is
// validated like the other integer flags.
let db: TestDatabase
let provider: TestProcess
beforeAll(async () => {
  db = await createTestDatabase()
  provider = await startProvider()
})
afterAll(async () => {
  await provider?.stop()
  await db?.close()
})

describe('oncely serve --reconcile-after-ms', () => {
  it('turns the in-process reconciler on over RECONCILE_AFTER_MS=0: a dead claim is settled without any retry', async () => {
    const service = await startCli(
      ['serve', '--port', '0', '--database-url', db.url, '--schema', db.schema, '--provider-url', provider.url, '--stale-after-ms', '500', '--reconcile-after-ms', '1000'],
      { env: { RECONCILE_AFTER_MS: '0' } },
    )
    try {
      const user = newUser()
      const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
      const claim = await deadClaim(db, { scope: user, key: 'nobody-retries', fingerprint })
      // Nothing at the provider: the reconciler leaves it suspended with the same claim.
      let state: string | undefined
      for (let started = Date.now(); Date.now() - started < 15_000 && state !== 'suspended'; ) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        state = (await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'nobody-retries', staleAfterMs: 500 }))?.state
      }
      expect(state).toBe('suspended')
      expect((await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'nobody-retries' }))?.claimId).toBe(claim.claimId)
    } finally {
      await service.stop()
    }
  })

  it('a bad value is a usage error, exit 2, naming the setting, before anything starts', async () => {
    const env = { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema, PROVIDER_URL: provider.url }
    for (const value of ['soon', '1.5', '-1']) {
      const result = await runCli(['serve', '--port', '0', `--reconcile-after-ms=${value}`], env)
      expect(result.code, result.stderr).toBe(2)
      expect(result.stderr).toContain('RECONCILE_AFTER_MS must be an integer at least 0')
      expect(result.stdout).not.toMatch(/listening on/)
    }
    // Below the stale threshold it would take over claims their owners still renew.
    const low = await runCli(['serve', '--port', '0', '--stale-after-ms', '1000', '--reconcile-after-ms', '999'], env)
    expect(low.code).toBe(2)
    expect(low.stderr).toContain('RECONCILE_AFTER_MS must be 0 or at least IDEMPOTENCY_STALE_AFTER_MS (1000)')
  })
})
