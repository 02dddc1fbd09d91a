import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { chromium, type Browser, type Page } from 'playwright-core'
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
const TOKEN = 'the browser test console token'
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

  it('on its loopback listener: shows a stuck key made by a chaos crash, releases it from the page, reconciles another, refuses changes without the CSRF token or from another origin, and a forced release of a paid key', { timeout: 90_000 }, async () => {
    const user = newUser()
    const doomed = await startService(options)
    await post(doomed.url, { user, key: 'crashed-in-flight', headers: { 'x-chaos-crash': 'after-provider' } }).catch(() => undefined)
    expect((await doomed.exited).signal).toBe('SIGKILL')
    service = await startService(options)
    const api = service.url
    // Without CONSOLE_TOKEN the API has no console; it is on its own listener on 127.0.0.1.
    expect((await fetch(`${api}/console`)).status).toBe(404)
    const listener = /^console: (http:\/\/\S+)/m.exec(service.stdout())?.[1] ?? 'no console line'

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

    const { page, dialogs } = await openPage()
    const response = await page.goto(listener)
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
    }, { url: `${listener}/api/release`, body: JSON.stringify({ user, key: 'crashed-in-flight', force: true }) })
    expect(foreign).toBe('opaque')
    await other.close()
    // The page's own token is required, and the origin must be the console's.
    const csrf = await page.locator('meta[name="oncely-csrf"]').getAttribute('content')
    const release = (headers: Record<string, string>) =>
      fetch(`${listener}/api/release`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ user, key: 'crashed-in-flight', force: true }) })
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

    // A paid key: forcing its release would charge the next retry again; not without the token.
    await findKey(page, user, 'paid-0')
    await page.locator('#release').click()
    await page.locator('#message', { hasText: 'needs a console started with CONSOLE_TOKEN' }).waitFor()
    expect((await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'paid-0' }))?.status).toBe('completed')
    await page.close()
  })

  it('with CONSOLE_TOKEN: a login, then a forced release of a paid key only with the key typed again, and the retry charges again as the page warned', { timeout: 90_000 }, async () => {
    await service?.stop()
    service = await startService({ ...options, env: { ...options.env, CONSOLE_TOKEN: TOKEN } })
    const user = newUser()
    const paid = await post(service.url, { user, key: 'paid' })
    expect(paid.status).toBe(201)
    const { page, dialogs, answers } = await openPage()
    expect((await page.goto(`${service.url}/console`))?.status()).toBe(401)
    await page.locator('input[name="token"]').fill(TOKEN)
    await page.getByRole('button', { name: 'Log in' }).click()
    await page.locator('#counts .tile').first().waitFor()

    await findKey(page, user, 'paid')
    answers.push('not-the-key')
    await page.locator('#release').click()
    await page.locator('#message', { hasText: 'send the key again as "confirm"' }).waitFor()
    expect(dialogs.at(-1)).toMatch(/stored completed answer away: the next retry with this key runs as a NEW operation and charges again/)
    expect((await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'paid' }))?.status).toBe('completed')

    answers.push('paid')
    await page.locator('#release').click()
    await page.locator('#message', { hasText: 'released "paid"' }).waitFor()
    expect(await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'paid' })).toBeUndefined()
    expect(service.stderr()).toMatch(/idempotency key released .*actor="console \(token\) from 127\.0\.0\.1".*forced=true/)
    const retry = await post(service.url, { user, key: 'paid' })
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([201, null])
    expect(await providerCharges(provider.url, user)).toHaveLength(2)
    await page.close()
  })

  /** A page whose dialogs are recorded and accepted; a prompt is answered with the next of `answers`. */
  async function openPage() {
    const page = await (browser as Browser).newPage({ viewport: { width: 1280, height: 900 } })
    const dialogs: string[] = []
    const answers: string[] = []
    page.on('dialog', (dialog) => {
      dialogs.push(dialog.message())
      void (dialog.type() === 'prompt' ? dialog.accept(answers.shift() ?? '') : dialog.accept())
    })
    return { page, dialogs, answers }
  }

  async function findKey(page: Page, user: string, key: string): Promise<void> {
    await page.locator('#search input[name="user"]').fill(user)
    await page.locator('#search input[name="key"]').fill(key)
    await page.getByRole('button', { name: 'Find' }).click()
    await page.locator('#details dd', { hasText: key }).first().waitFor()
  }
})

if (!runs) {
  describe('GET /console in Chromium', () => {
    it.skip(inThisPass ? `skipped: no Chromium at ${CHROMIUM}` : 'skipped: runs in the DATABASE_URL pass only', () => {})
  })
}
