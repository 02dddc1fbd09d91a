import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startCli } from '../helpers/processes.js'
import { send } from './support/send.js'

// `oncely console` as a real process (issue 22): without CONSOLE_TOKEN, loopback only, by socket;
// with it, the token on every request, on any interface.
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db?.close()
})

const TOKEN = 'the console cli test token'

describe('oncely console', () => {
  it('refuses a non-loopback --host without CONSOLE_TOKEN (exit 2)', async () => {
    const result = await runCli(['console', '--host', '0.0.0.0', '--port', '0', '--database-url', db.url, '--schema', db.schema], { CONSOLE_TOKEN: '' })
    expect(result.code).toBe(2)
    expect(result.stderr).toMatch(/--host 0\.0\.0\.0 is not loopback: set CONSOLE_TOKEN/)
  })

  it('without a token: serves 127.0.0.1, and answers 404 to a request a proxy forwarded', { timeout: 60_000 }, async () => {
    const running = await startCli(['console', '--port', '0', '--database-url', db.url, '--schema', db.schema], { env: { CONSOLE_TOKEN: '' } })
    try {
      expect(new URL(running.url).hostname).toBe('127.0.0.1')
      expect((await send(`${running.url}/api/overview`)).status).toBe(200)
      expect((await send(`${running.url}/api/overview`, { headers: { 'x-forwarded-for': '198.51.100.7' } })).status).toBe(404)
    } finally {
      await running.stop()
    }
  })

  it('with CONSOLE_TOKEN on 0.0.0.0: 401 without it, whatever Host says, and 200 with it', { timeout: 60_000 }, async () => {
    const running = await startCli(['console', '--host', '0.0.0.0', '--port', '0', '--database-url', db.url, '--schema', db.schema], { env: { CONSOLE_TOKEN: TOKEN } })
    try {
      const url = running.url.replace('0.0.0.0', '127.0.0.1')
      for (const host of ['127.0.0.1', 'localhost']) expect((await send(`${url}/api/overview`, { headers: { host } })).status).toBe(401)
      expect((await send(`${url}/api/overview`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200)
    } finally {
      await running.stop()
    }
  })
})
