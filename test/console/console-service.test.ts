import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { resolveServiceConfig } from '../../src/reference-service/config.js'
import { startService } from '../../src/reference-service/service.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startProvider, type TestProcess } from '../helpers/processes.js'
import { send } from './support/send.js'

// The reference service in process (issue 22): without CONSOLE_TOKEN the API has no console,
// which is on a listener of its own on 127.0.0.1, stopped with the service; CONSOLE_PORT=off
// starts none.
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

const start = (env: Record<string, string>) =>
  startService(resolveServiceConfig({ PORT: '0', DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema, PROVIDER_URL: provider.url, ONCELY_RELAY: '0', ...env }), () => {})

describe('the reference service console without CONSOLE_TOKEN', () => {
  it('answers 404 on the API, serves the console on 127.0.0.1 alone, and closes that listener when it stops', { timeout: 60_000 }, async () => {
    const service = await start({ HOST: '0.0.0.0' })
    let stopped = false
    try {
      const api = await send(`${service.url.replace('0.0.0.0', '127.0.0.1')}/console`)
      expect(api.status).toBe(404)
      expect(api.headers['content-type']).toMatch(/^application\/problem\+json/)
      expect(api.text).toMatch(/not served on the API without CONSOLE_TOKEN: the console is on its own listener on 127\.0\.0\.1/)
      const url = service.consoleUrl ?? 'none'
      expect(new URL(url).hostname).toBe('127.0.0.1')
      expect((await send(url)).status).toBe(200)
      await service.stop()
      stopped = true
      await expect(send(url)).rejects.toThrow(/ECONNREFUSED/)
    } finally {
      if (!stopped) await service.stop()
    }
  })

  it('with CONSOLE_PORT=off: no listener, and the API says the console is off', { timeout: 60_000 }, async () => {
    const service = await start({ CONSOLE_PORT: 'off' })
    try {
      expect(service.consoleUrl).toBeUndefined()
      const api = await send(`${service.url}/console/api/keys`)
      expect(api.status).toBe(404)
      expect(api.text).toMatch(/the console is off \(CONSOLE_PORT=off\)/)
    } finally {
      await service.stop()
    }
  })
})
