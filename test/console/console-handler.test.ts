import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest, isOncelyError } from '../../src/index.js'
import { buildConsole, createConsole, type OperatorConsole } from '../../src/ops/console/console-handler.js'
import { serveConsole, type ServedConsole } from '../../src/ops/console/serve-console.js'
import { inspectKey } from '../../src/ops/keys.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse, owned } from '../helpers/engine.js'
import { deadClaim } from '../ops/support/dead-claim.js'
import { send } from './support/send.js'

let db: TestDatabase
const served: ServedConsole[] = []
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await Promise.all(served.map((console) => console.close()))
  await db.close()
})

const lines: string[] = []
const log = (line: string) => lines.push(line)
const TOKEN = 'a-console-token-of-some-length'
const fingerprint = fingerprintRequest({ method: 'POST', route: '/x', body: null })
const database = () => ({ pool: db.pool, schema: db.schema })
const at = (path: string, init: RequestInit & { host?: string } = {}) => new Request(`http://${init.host ?? '127.0.0.1:4000'}/console${path}`, init)
const stillThere = async (scope: string, key: string) => (await inspectKey(database(), { scope, key })) !== undefined

async function serve(options: { token?: string } = {}): Promise<ServedConsole> {
  const console = await serveConsole({ database: database(), staleAfterMs: 1000, log, port: 0, ...options })
  served.push(console)
  return console
}

async function completedKey(scope: string, key: string): Promise<void> {
  const execution = owned(await engineOn(db).engine.begin({ scope, key, fingerprint }))
  await execution.complete(jsonResponse(201, '{"id":"ch_1"}'))
}

async function csrfOf(url: string, headers: Record<string, string> = {}): Promise<string> {
  return /name="oncely-csrf" content="([^"]+)"/.exec((await send(url, { headers })).text)?.[1] ?? ''
}

const release = (url: string, body: object, headers: Record<string, string>) =>
  send(`${url}/api/release`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })

describe('the console without a token', () => {
  it('cannot be made for mounting on an app: createConsole needs a token', () => {
    let thrown: unknown
    try {
      createConsole({ database: database() } as never)
    } catch (error) {
      thrown = error
    }
    expect(isOncelyError(thrown) && thrown.code).toBe('ONCELY_INVALID_OPTION')
    expect(String(thrown)).toMatch(/option token is required: a console without one is served only by serveConsole/)
  })

  it.each(['0.0.0.0', '::', '192.0.2.10', 'ops.example'])('refuses to bind the non-loopback host %s', async (host) => {
    const attempt = serveConsole({ database: database(), host, port: 0, log })
    await expect(attempt).rejects.toThrow(/option host must be a loopback address/)
  })

  it('serves its own loopback listener, by the socket: a proxy header or a rebound host name is refused', async () => {
    const { url } = await serve()
    expect((await send(url)).status).toBe(200)
    expect((await send(url, { headers: { host: 'localhost' } })).status).toBe(200)
    for (const header of ['x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'forwarded', 'x-real-ip', 'via']) {
      const answer = await send(`${url}/api/overview`, { headers: { [header]: '127.0.0.1' } })
      expect([header, answer.status]).toEqual([header, 404])
    }
    expect((await send(url, { headers: { host: 'rebound.example:4000' } })).status).toBe(403)
  })

  it('lets in no request it was not given by its own listener with the socket, whatever its Host says', async () => {
    const inner = buildConsole({ database: database(), log }, 'loopback listener')
    for (const host of ['127.0.0.1:4000', 'localhost:4000', '[::1]:4000']) {
      expect((await inner.fetch(at('', { host, headers: { host } }))).status).toBe(404)
      expect((await inner.fetch(at('/api/keys?user=c1', { host }))).status).toBe(404)
    }
  })

  it('refuses a change without the CSRF token or from another origin, and makes it with both', async () => {
    await deadClaim(db, { scope: 'c1', key: 'k', fingerprint })
    const { url } = await serve()
    const csrf = await csrfOf(url)
    const body = { user: 'c1', key: 'k', force: true }
    expect((await release(url, body, {})).status).toBe(403)
    expect((await release(url, body, { 'x-csrf-token': 'guessed' })).status).toBe(403)
    const foreign = await release(url, body, { 'x-csrf-token': csrf, origin: 'http://evil.example' })
    expect(foreign.status).toBe(403)
    expect((JSON.parse(foreign.text) as { detail: string }).detail).toMatch(/another origin/)
    expect((await release(url, body, { 'x-csrf-token': csrf, 'sec-fetch-site': 'cross-site' })).status).toBe(403)
    expect(await stillThere('c1', 'k')).toBe(true)
    const done = await release(url, body, { 'x-csrf-token': csrf, origin: new URL(url).origin })
    expect(done.status).toBe(200)
    expect(await stillThere('c1', 'k')).toBe(false)
    expect(lines.find((line) => line.includes('idempotency key released') && line.includes('c1'))).toContain('console (loopback listener) from 127.0.0.1')
  })

  it('refuses to force the release of a key with a stored outcome, confirmed or not: that needs the token', async () => {
    await completedKey('c2', 'paid')
    const { url } = await serve()
    const csrf = await csrfOf(url)
    const refused = await release(url, { user: 'c2', key: 'paid', force: true, confirm: 'paid' }, { 'x-csrf-token': csrf, origin: new URL(url).origin })
    expect(refused.status).toBe(403)
    expect((JSON.parse(refused.text) as { reason: string; detail: string })).toMatchObject({ reason: 'refused', detail: expect.stringMatching(/needs a console started with CONSOLE_TOKEN/) as unknown })
    expect(await stillThere('c2', 'paid')).toBe(true)
    expect(lines.some((line) => line.includes('forced release of an idempotency key refused') && line.includes('console (loopback listener)'))).toBe(true)
  })
})

describe('the console with a token', () => {
  it('needs it from every request, whatever Host or X-Forwarded-* it carries: a login page, then Authorization: Bearer or the login cookie', async () => {
    const operatorConsole: OperatorConsole = createConsole({ database: database(), token: TOKEN, log })
    for (const host of ['127.0.0.1:4000', 'localhost:4000', '[::1]:4000', 'ops.example:4000']) {
      const headers = { 'x-forwarded-for': '127.0.0.1', 'x-forwarded-host': 'localhost', 'x-real-ip': '127.0.0.1' }
      const anonymous = await operatorConsole.fetch(at('', { host, headers }))
      expect([host, anonymous.status]).toEqual([host, 401])
      expect(await anonymous.text()).toContain('name="token"')
      expect((await operatorConsole.fetch(at('/api/overview', { host, headers }))).status).toBe(401)
      expect((await operatorConsole.fetch(at('/api/keys?user=c1', { host, headers }))).status).toBe(401)
    }
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

  it('forces the release of a key with a stored outcome only with the key typed again as confirm, and logs who did', async () => {
    await completedKey('c3', 'paid')
    const { url } = await serve({ token: TOKEN })
    const auth = { authorization: `Bearer ${TOKEN}` }
    const csrf = await csrfOf(url, auth)
    const headers = { ...auth, 'x-csrf-token': csrf, origin: new URL(url).origin, 'x-forwarded-for': '203.0.113.9' }
    const unforced = await release(url, { user: 'c3', key: 'paid' }, headers)
    expect([unforced.status, (JSON.parse(unforced.text) as { reason: string }).reason]).toEqual([409, 'may-have-acted'])
    for (const confirm of [undefined, '', 'other', 'PAID']) {
      const refused = await release(url, { user: 'c3', key: 'paid', force: true, ...(confirm === undefined ? {} : { confirm }) }, headers)
      expect([confirm, refused.status]).toEqual([confirm, 403])
      expect(refused.text).toMatch(/send the key again as \\"confirm\\"/)
    }
    expect(await stillThere('c3', 'paid')).toBe(true)
    const done = await release(url, { user: 'c3', key: 'paid', force: true, confirm: 'paid' }, headers)
    expect(done.status).toBe(200)
    expect(JSON.parse(done.text)).toMatchObject({ released: true, forced: true })
    expect(await stillThere('c3', 'paid')).toBe(false)
    const audit = lines.find((line) => line.includes('idempotency key released') && line.includes('scope=c3'))
    expect(audit).toContain('console (token) from 127.0.0.1 (X-Forwarded-For claims \\"203.0.113.9\\")')
    expect(audit).toContain('forced=true')
  })
})

describe('createConsole mounted on your own server', () => {
  it('names the actor from the peer your server passes, and a peer lets no one in without the token (issue 24)', async () => {
    await completedKey('c4', 'paid')
    const mounted = createConsole({ database: database(), staleAfterMs: 1000, log, token: TOKEN })
    const peer = { localAddress: '127.0.0.1', remoteAddress: '198.51.100.7' }
    expect((await mounted.fetch(at(''), { localAddress: '127.0.0.1', remoteAddress: '127.0.0.1' })).status).toBe(401)
    const auth = { authorization: `Bearer ${TOKEN}` }
    const csrf = /name="oncely-csrf" content="([^"]+)"/.exec(await (await mounted.fetch(at('', { headers: auth }), peer)).text())?.[1] ?? ''
    const headers = { ...auth, 'x-csrf-token': csrf, origin: 'http://127.0.0.1:4000', 'content-type': 'application/json' }
    const done = await mounted.fetch(at('/api/release', { method: 'POST', headers, body: JSON.stringify({ user: 'c4', key: 'paid', force: true, confirm: 'paid' }) }), peer)
    expect(done.status).toBe(200)
    const audit = lines.find((line) => line.includes('idempotency key released') && line.includes('scope=c4'))
    expect(audit).toContain('console (token) from 198.51.100.7')
  })
})
