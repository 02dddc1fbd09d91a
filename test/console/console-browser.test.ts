import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { chromium, type Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { deriveStepKey, fingerprintRequest } from '../../src/index.js'
import { inspectKey } from '../../src/ops/keys.js'
import { providerMetadata } from '../../src/reference-service/responses.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim } from '../helpers/engine.js'
import { deadClaim } from '../ops/support/dead-claim.js'
import { providerCharges, startProvider, startService, type ServiceOptions, type TestProcess } from '../helpers/processes.js'
import { newUser, post } from '../service/support/api.js'

// A real browser for any page (docs/conventions.md, Tests): playwright-core driving Debian's
// Chromium. Runs in the DATABASE_URL pass of CI only (it does not depend on the PostgreSQL
// version); skipped with a message where no Chromium is installed, never under CI=true.
const CHROMIUM = '/usr/bin/chromium'
const inThisPass = Boolean(process.env.DATABASE_URL)
const hasChromium = existsSync(CHROMIUM)
if (!inThisPass) console.warn('console browser test: runs in the DATABASE_URL pass only (see .ci/run)')
else if (!hasChromium && process.env.CI !== 'true') console.warn(`console browser test skipped: no Chromium at ${CHROMIUM} (apt-get install -y chromium)`)
const runs = inThisPass && (hasChromium || process.env.CI === 'true')

const STALE_AFTER_MS = 1000
const SCREENSHOT = fileURLToPath(new URL('../../docs/console.png', import.meta.url))

describe.runIf(runs)('GET /console in Chromium', () => {
  let db: TestDatabase
  let provider: TestProcess
  let service: TestProcess | undefined
  let browser: Browser | undefined
  let options: ServiceOptions

  beforeAll(async () => {
    db = await createTestDatabase()
    provider = await startProvider()
    options = { databaseUrl: db.url, schema: db.schema, providerUrl: provider.url, staleAfterMs: STALE_AFTER_MS, chaos: true, env: { RECONCILE_AFTER_MS: '0' } }
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] })
  })

  afterAll(async () => {
    await browser?.close()
    await service?.stop()
    await provider?.stop()
    await db?.close()
  })

  it('shows a stuck key made by a chaos crash, releases it from the page, reconciles another, and refuses changes without the token or from another origin', { timeout: 90_000 }, async () => {
    const user = newUser()
    const doomed = await startService(options)
    await post(doomed.url, { user, key: 'crashed-in-flight', headers: { 'x-chaos-crash': 'after-provider' } }).catch(() => undefined)
    expect((await doomed.exited).signal).toBe('SIGKILL')
    service = await startService(options)
    const api = service.url

    // A second stuck claim whose owner charged the provider, for the reconcile button.
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000, currency: 'usd', customer: 'cus_ok' } })
    const claim = await deadClaim(db, { scope: user, key: 'to-reconcile', fingerprint, fresh: true })
    const charged = await fetch(`${provider.url}/v1/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': deriveStepKey({ scope: user, key: 'to-reconcile', claimId: claim.claimId, step: 'charge' }) },
      body: JSON.stringify({ amount: 1000, currency: 'usd', customer: 'cus_ok', metadata: providerMetadata(user, 'to-reconcile', claim.claimId) }),
    })
    expect(charged.status).toBe(200)
    await ageClaim(db, user, 'to-reconcile')
    await ageClaim(db, user, 'crashed-in-flight')

    const page = await (browser as Browser).newPage({ viewport: { width: 1280, height: 900 } })
    const dialogs: string[] = []
    page.on('dialog', (dialog) => {
      dialogs.push(dialog.message())
      void dialog.accept()
    })
    const response = await page.goto(`${api}/console`)
    expect(response?.status()).toBe(200)
    const stuckRow = page.locator('#stuck tr[data-key="crashed-in-flight"]')
    await stuckRow.waitFor()
    expect(await stuckRow.locator('td').first().textContent()).toBe('stuck')
    // Requests after the first sample, so the rates show them (and the screenshot too).
    for (let i = 0; i < 3; i++) await post(api, { user, key: `paid-${i}` })
    // The page's CSP allows no eval, so the rates are read through locators, not page functions.
    await expect.poll(async () => (await page.locator('#rates .tile b').allTextContents()).some((text) => Number(text) > 0), { timeout: 15_000 }).toBe(true)
    await page.screenshot({ path: SCREENSHOT, fullPage: true })

    // A page of another origin (the provider's port) posts a release to the console: refused.
    const other = await (browser as Browser).newPage()
    await other.goto(`${provider.url}/healthz`)
    const foreign = await other.evaluate(async ({ url, body }) => {
      const answer = await fetch(url, { method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'content-type': 'text/plain' }, body })
      return answer.type
    }, { url: `${api}/console/api/release`, body: JSON.stringify({ user, key: 'crashed-in-flight', force: true }) })
    expect(foreign).toBe('opaque')
    await other.close()
    // The page's own token is required, and the origin must be the console's.
    const csrf = await page.locator('meta[name="oncely-csrf"]').getAttribute('content')
    const release = (headers: Record<string, string>) =>
      fetch(`${api}/console/api/release`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ user, key: 'crashed-in-flight', force: true }) })
    expect((await release({})).status).toBe(403)
    expect((await release({ 'x-csrf-token': csrf ?? '', origin: 'http://evil.example' })).status).toBe(403)
    expect(await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'crashed-in-flight' })).toBeDefined()

    // Release from the page: details, confirm, and (the claim may have acted) confirm the force.
    await stuckRow.getByRole('button', { name: 'Details' }).click()
    await page.locator('#details dd', { hasText: 'crashed-in-flight' }).waitFor()
    await page.locator('#release').click()
    await page.locator('#message', { hasText: 'released' }).waitFor()
    expect(dialogs[0]).toMatch(/NEW operation/)
    expect(dialogs[1]).toMatch(/provider call may have happened/)
    expect(await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'crashed-in-flight' })).toBeUndefined()
    await page.locator('#stuck tr[data-key="crashed-in-flight"]').waitFor({ state: 'detached' })

    // Reconcile from the page: the charge is found at the provider and the key completed.
    await page.locator('#reconcile').click()
    await page.locator('#message', { hasText: 'completed to-reconcile' }).waitFor()
    expect((await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'to-reconcile' }))?.status).toBe('completed')
    expect((await providerCharges(provider.url, user)).filter((c) => c.metadata.order_id === `ord_${claim.claimId}`)).toHaveLength(1)
    await page.close()
  })
})

if (!runs) {
  describe('GET /console in Chromium', () => {
    it.skip(inThisPass ? `skipped: no Chromium at ${CHROMIUM}` : 'skipped: runs in the DATABASE_URL pass only', () => {})
  })
}
