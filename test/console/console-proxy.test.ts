import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inspectKey } from '../../src/ops/keys.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { providerCharges, startProvider, startService, type TestProcess } from '../helpers/processes.js'
import { newUser, post } from '../service/support/api.js'
import { startReverseProxy, type ProxyMode, type ReverseProxy } from './support/reverse-proxy.js'
import { send } from './support/send.js'

// Issue 22: the service on 127.0.0.1 behind a reverse proxy (nginx's default `proxy_pass` sends
// `Host: 127.0.0.1:PORT`) served the token-less console to anyone, who force-released a paid
// key: the victim's retry charged again. Driven here through a real proxy, with the Host and
// X-Forwarded-* headers an attacker chooses: every console path answers 401 or 404.
const TOKEN = 'the-console-token-of-this-test'

let db: TestDatabase
let provider: TestProcess
const started: Array<() => Promise<unknown>> = []
beforeAll(async () => {
  db = await createTestDatabase()
  provider = await startProvider()
})
afterAll(async () => {
  for (const stop of started.reverse()) await stop()
  await provider?.stop()
  await db?.close()
})

async function service(env: Record<string, string>): Promise<TestProcess> {
  const running = await startService({ databaseUrl: db.url, schema: db.schema, providerUrl: provider.url, env })
  started.push(() => running.stop())
  return running
}

async function proxy(upstream: string, mode: ProxyMode): Promise<ReverseProxy> {
  const running = await startReverseProxy(upstream, mode)
  started.push(() => running.close())
  return running
}

function consoleListener(running: TestProcess): string {
  const url = /^console: (http:\/\/\S+)/m.exec(running.stdout())?.[1]
  if (url === undefined) throw new Error(`no console line in:\n${running.stdout()}`)
  return url
}

/** What an attacker sends: the Host of their choice, and proxy headers claiming a local client. */
function attackerHeaders(upstream: string): Array<Record<string, string>> {
  const hosts = [undefined, new URL(upstream).host, 'localhost', '127.0.0.1', '[::1]', 'evil.example']
  const claims = [{}, { 'x-forwarded-for': '127.0.0.1', 'x-forwarded-host': 'localhost', 'x-forwarded-proto': 'https', 'x-real-ip': '127.0.0.1', forwarded: 'for=127.0.0.1;host=localhost' }]
  return hosts.flatMap((host) => claims.map((claim) => ({ ...(host === undefined ? {} : { host }), ...claim })))
}

/**
 * Every console path through `proxyUrl` with every header set: the statuses seen, by request.
 * The attack is the whole one: read the page for its CSRF token, then force-release the key.
 */
async function attack(proxyUrl: string, upstream: string, victim: { user: string; key: string }): Promise<Map<string, number>> {
  const seen = new Map<string, number>()
  for (const headers of attackerHeaders(upstream)) {
    const label = (what: string) => `${what} ${JSON.stringify(headers)}`
    const page = await send(`${proxyUrl}/console`, { headers })
    seen.set(label('GET /console'), page.status)
    const csrf = /name="oncely-csrf" content="([^"]+)"/.exec(page.text)?.[1] ?? 'none'
    for (const path of ['/console/', '/console/console.js', '/console/api/overview', `/console/api/keys?user=${victim.user}`, `/console/api/keys?user=${victim.user}&key=${victim.key}`]) {
      seen.set(label(`GET ${path}`), (await send(`${proxyUrl}${path}`, { headers })).status)
    }
    const change = { ...headers, 'content-type': 'application/json', 'x-csrf-token': csrf, origin: proxyUrl }
    const body = JSON.stringify({ user: victim.user, key: victim.key, force: true, confirm: victim.key })
    seen.set(label('POST /console/api/release'), (await send(`${proxyUrl}/console/api/release`, { method: 'POST', headers: change, body })).status)
    seen.set(label('POST /console/api/reconcile'), (await send(`${proxyUrl}/console/api/reconcile`, { method: 'POST', headers: change, body: '{}' })).status)
    // No Origin: a client that is not a browser need not send one, so the token is what it meets.
    const login = { ...headers, 'content-type': 'application/x-www-form-urlencoded' }
    seen.set(label('POST /console/login'), (await send(`${proxyUrl}/console/login`, { method: 'POST', headers: login, body: 'token=guessed-guessed-guessed' })).status)
  }
  return seen
}

async function paidKey(api: string): Promise<{ user: string; key: string; text: string }> {
  const user = newUser()
  const first = await post(api, { user, key: 'order-1' })
  expect(first.status).toBe(201)
  return { user, key: 'order-1', text: first.text }
}

/** The victim's key is intact: the retry replays the stored answer, and the provider holds one charge. */
async function victimUnharmed(api: string, victim: { user: string; key: string; text: string }): Promise<void> {
  expect(await inspectKey({ pool: db.pool, schema: db.schema }, { scope: victim.user, key: victim.key })).toMatchObject({ status: 'completed' })
  const retry = await post(api, { user: victim.user, key: victim.key })
  expect(retry.headers.get('idempotent-replayed')).toBe('true')
  expect(retry.text).toBe(victim.text)
  expect(await providerCharges(provider.url, victim.user)).toHaveLength(1)
}

const only = (seen: Map<string, number>, allowed: number[]) => [...seen].filter(([, status]) => !allowed.includes(status))

describe('the console through a reverse proxy', () => {
  it('without CONSOLE_TOKEN: the API answers 404 on every console path, whatever Host or X-Forwarded-* reach it', { timeout: 120_000 }, async () => {
    const running = await service({})
    const victim = await paidKey(running.url)
    for (const mode of ['default', 'forwarding'] as const) {
      const front = await proxy(running.url, mode)
      const seen = await attack(front.url, running.url, victim)
      expect(seen.size).toBeGreaterThan(100)
      expect(only(seen, [404])).toEqual([])
    }
    // Its own listener, which a proxy in front of it cannot open either once it says it forwarded.
    const listener = consoleListener(running)
    expect(new URL(listener).hostname).toBe('127.0.0.1')
    expect((await send(listener)).status).toBe(200)
    const front = await proxy(new URL(listener).origin, 'forwarding')
    expect(only(await attack(front.url, new URL(listener).origin, victim), [404])).toEqual([])
    await victimUnharmed(running.url, victim)
  })

  it('with CONSOLE_TOKEN: 401 on every console path without the token, on the API and on its listener', { timeout: 120_000 }, async () => {
    const running = await service({ CONSOLE_TOKEN: TOKEN })
    const victim = await paidKey(running.url)
    for (const upstream of [running.url, new URL(consoleListener(running)).origin]) {
      for (const mode of ['default', 'forwarding'] as const) {
        const front = await proxy(upstream, mode)
        const seen = await attack(front.url, upstream, victim)
        expect(only(seen, [401])).toEqual([])
      }
    }
    // The token lets the operator in through the proxy.
    const front = await proxy(running.url, 'default')
    expect((await send(`${front.url}/console/api/overview`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200)
    await victimUnharmed(running.url, victim)
  })
})
