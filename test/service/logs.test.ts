import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { logKey } from '../../src/index.js'
import { resolveServiceConfig } from '../../src/reference-service/config.js'
import { startService, type RunningService } from '../../src/reference-service/service.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startProvider, type TestProcess } from '../helpers/processes.js'
import { charge, newUser, post } from './support/api.js'

// The reference service given a pino-style logger (in process: the logger is an object): the
// lines about a request carry route, scope, the hashed key, code and instance as fields, and
// never the key, the Authorization header or a cookie.
interface LogRecord {
  level: string
  fields: Record<string, unknown>
  message: string
}

let db: TestDatabase
let provider: TestProcess
let proxy: TcpProxy
let service: RunningService
const records: LogRecord[] = []

beforeAll(async () => {
  db = await createTestDatabase()
  provider = await startProvider()
  proxy = await startTcpProxy(db.url)
  const record = (level: string) => (fields: Record<string, unknown>, message: string) => void records.push({ level, fields, message })
  const config = resolveServiceConfig({}, { port: 0, databaseUrl: proxy.url, schema: db.schema, providerUrl: provider.url, reconcileAfterMs: 0, relay: false })
  service = await startService(config, { info: record('info'), warn: record('warn'), error: record('error') })
})
afterAll(async () => {
  proxy?.restore()
  await service?.stop()
  await proxy?.close()
  await provider?.stop()
  await db?.close()
})

describe("the reference service's log lines", () => {
  it('carry route, scope, the hashed key, code and instance as fields, and never the key, the Authorization header or a cookie', async () => {
    const user = newUser()
    const headers = { cookie: 'session=svc-cookie-secret' }
    const keys = [`tok_${randomUUID()}`, `tok_${randomUUID()}`, `tok_${randomUUID()}`] as const
    // The same payload under a second key: the repeated-payload warning.
    expect((await post(service.url, { user, key: keys[0], body: charge('cus_logs'), headers })).status).toBe(201)
    expect((await post(service.url, { user, key: keys[1], body: charge('cus_logs'), headers })).status).toBe(201)
    const repeated = records.find((r) => r.message.includes('under a new Idempotency-Key'))
    expect(repeated).toMatchObject({ level: 'warn', fields: { route: 'POST /v1/charges', scope: user, key: logKey(keys[1]) } })

    // The database away: the adapter's line names the code and the instance the client got.
    proxy.cut()
    const away = await post(service.url, { user, key: keys[2], body: charge('cus_logs', 2000), headers })
    // And the service's own line, from a route of its own.
    const read = await fetch(`${service.url}/v1/charges/ch_${'0'.repeat(24)}`, { headers: { authorization: `Bearer demo_${user}`, ...headers } })
    proxy.restore()
    expect(away.status).toBe(503)
    expect(read.status).toBe(503)
    expect(records.find((r) => r.message.startsWith('database unavailable'))).toMatchObject({ level: 'warn', fields: { route: 'GET /v1/charges/:id', scope: user } })
    const { instance } = away.json as { instance: string }
    expect(records.find((r) => r.fields.instance === instance)).toMatchObject({
      level: 'error',
      fields: { route: 'POST /v1/charges', scope: user, key: logKey(keys[2]), code: 'ONCELY_STORE_UNAVAILABLE', instance },
    })

    const logged = JSON.stringify(records)
    for (const secret of [...keys, `demo_${user}`, 'Bearer', 'svc-cookie-secret']) expect(logged).not.toContain(secret)
  })
})
