import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { createConsole } from '../../src/ops/console/console-handler.js'
import { inspectKey } from '../../src/ops/keys.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const quiet = { info() {}, warn() {}, error() {} }
const TOKEN = 'a-console-token-of-some-length'
const at = (path: string, init: RequestInit & { host?: string } = {}) => new Request(`http://${init.host ?? '127.0.0.1:4000'}/console${path}`, init)

async function csrfOf(operatorConsole: ReturnType<typeof createConsole>, headers: Record<string, string> = {}): Promise<string> {
  const page = await (await operatorConsole.fetch(at('', { headers }))).text()
  return /name="oncely-csrf" content="([^"]+)"/.exec(page)?.[1] ?? ''
}

describe('the console handler', () => {
  it('refuses a change without the CSRF token or from another origin, and makes it with both', async () => {
    const { store } = engineOn(db)
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/x', body: null })
    const claimed = await store.claim({ scope: 'c1', key: 'k', fingerprint }, { ttlMs: 86_400_000, staleAfterMs: 1000 })
    expect(claimed.kind).toBe('claimed')
    await ageClaim(db, 'c1', 'k')
    const operatorConsole = createConsole({ database: { pool: db.pool, schema: db.schema }, staleAfterMs: 1000, log: quiet })
    const csrf = await csrfOf(operatorConsole)
    const body = JSON.stringify({ user: 'c1', key: 'k', force: true })
    const post = (headers: Record<string, string>) => operatorConsole.fetch(at('/api/release', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body }))
    expect((await post({})).status).toBe(403)
    expect((await post({ 'x-csrf-token': 'guessed' })).status).toBe(403)
    const foreign = await post({ 'x-csrf-token': csrf, origin: 'http://evil.example' })
    expect(foreign.status).toBe(403)
    expect(((await foreign.json()) as { detail: string }).detail).toMatch(/another origin/)
    expect((await post({ 'x-csrf-token': csrf, 'sec-fetch-site': 'cross-site' })).status).toBe(403)
    expect(await inspectKey({ pool: db.pool, schema: db.schema }, { scope: 'c1', key: 'k' })).toBeDefined()
    const done = await post({ 'x-csrf-token': csrf, origin: 'http://127.0.0.1:4000' })
    expect(done.status).toBe(200)
    expect(await inspectKey({ pool: db.pool, schema: db.schema }, { scope: 'c1', key: 'k' })).toBeUndefined()
  })

  it('is not served on a non-loopback host without a token, and answers only loopback host names without one', async () => {
    const exposed = createConsole({ database: { pool: db.pool, schema: db.schema }, exposed: true, log: quiet })
    expect((await exposed.fetch(at(''))).status).toBe(404)
    const local = createConsole({ database: { pool: db.pool, schema: db.schema }, log: quiet })
    expect((await local.fetch(at('', { host: 'rebound.example:4000' }))).status).toBe(403)
    expect((await local.fetch(at('', { host: 'localhost:4000' }))).status).toBe(200)
  })

  it('with a token: a login page, then Authorization: Bearer or the login cookie', async () => {
    const operatorConsole = createConsole({ database: { pool: db.pool, schema: db.schema }, exposed: true, token: TOKEN, log: quiet })
    const anonymous = await operatorConsole.fetch(at('', { host: 'ops.example:4000' }))
    expect(anonymous.status).toBe(401)
    expect(await anonymous.text()).toContain('name="token"')
    expect((await operatorConsole.fetch(at('/api/overview', { host: 'ops.example:4000' }))).status).toBe(401)
    expect((await operatorConsole.fetch(at('/api/overview', { host: 'ops.example:4000', headers: { authorization: `Bearer ${TOKEN}` } }))).status).toBe(200)
    const wrong = await operatorConsole.fetch(at('/login', { host: 'ops.example:4000', method: 'POST', body: new URLSearchParams({ token: 'nope' }) }))
    expect(wrong.status).toBe(401)
    const login = await operatorConsole.fetch(at('/login', { host: 'ops.example:4000', method: 'POST', headers: { origin: 'http://ops.example:4000' }, body: new URLSearchParams({ token: TOKEN }) }))
    expect(login.status).toBe(303)
    const cookie = login.headers.get('set-cookie') ?? ''
    expect(cookie).toMatch(/HttpOnly; SameSite=Strict/)
    expect(cookie).not.toContain(TOKEN)
    const page = await operatorConsole.fetch(at('', { host: 'ops.example:4000', headers: { cookie: cookie.split(';')[0] ?? '' } }))
    expect(page.status).toBe(200)
    expect(page.headers.get('content-security-policy')).toMatch(/script-src 'self'/)
  })
})
