import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { REQUEST_EXIT } from '../../src/cli/commands/request.js'
import { createClient, fileKeyStore } from '../../src/client/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { providerCharges, startProvider, startService, type TestProcess } from '../helpers/processes.js'
import { startGate, type Gate } from '../service/support/gate.js'
import { startTcpProxy } from '../helpers/tcp-proxy.js'
import { deferred } from '../helpers/deferred.js'
import { runRequestCommand, startNode } from './support/node-process.js'

// The proofs, against the real reference service and fake provider processes.
let db: TestDatabase
let provider: TestProcess
let gate: Gate
let service: TestProcess
let directory: string

beforeAll(async () => {
  directory = await mkdtemp(path.join(tmpdir(), 'oncely-e2e-keys-'))
  db = await createTestDatabase()
  provider = await startProvider()
  gate = await startGate(provider.url)
  service = await startService({ databaseUrl: db.url, schema: db.schema, providerUrl: gate.url, staleAfterMs: 30_000 })
})

afterAll(async () => {
  await service?.stop()
  await gate?.close()
  await provider?.stop()
  await db?.close()
  await rm(directory, { recursive: true, force: true })
})

let nextUser = 800_000 + Math.floor(Math.random() * 100_000)
const charge = { amount: 1000, currency: 'usd', customer: 'cus_42' }

describe('the client against the reference service', () => {
  it('through a proxy that cuts the first two responses: 201, and the provider has exactly one charge', async () => {
    const user = String(nextUser++)
    const proxy = await startTcpProxy(service.url)
    void proxy.cutNextAnswer()
    void proxy.cutNextAnswer()
    try {
      const client = createClient({
        baseUrl: proxy.url,
        keyStore: fileKeyStore(path.join(directory, 'proxy')),
        headers: { authorization: `Bearer demo_${user}` },
        baseDelayMs: 10,
      })
      const res = await client.post('/v1/charges', charge, { operationId: `order-${user}:charge` })
      expect(res.status).toBe(201)
      expect(res.json()).toMatchObject({ object: 'charge', amount: 1000, customer: 'cus_42' })
      expect(res.attempts.map((a) => a.status ?? 'cut')).toEqual(['cut', 'cut', 201])
      expect(res.headers.get('idempotent-replayed')).toBe('true')
      expect(proxy.cuts()).toBe(2)
      expect(await providerCharges(provider.url, user)).toHaveLength(1)
    } finally {
      await proxy.close()
    }
  })

  it('a client SIGKILLed after its first attempt, restarted: 409 while in progress, then the replay; one charge', async () => {
    const user = String(nextUser++)
    const keys = path.join(directory, 'crash')
    const args = [
      'POST', `${service.url}/v1/charges`,
      '--operation', `order-${user}:charge`,
      '--data', JSON.stringify(charge),
      '--header', `authorization: Bearer demo_${user}`,
      '--key-store', keys,
    ]
    const providerCall = gate.holdNext()

    // The first client's request is claimed and waiting on the provider when the client dies.
    const doomed = startNode('src/cli/main.ts', ['request', ...args])
    await providerCall.arrived
    doomed.child.kill('SIGKILL')
    expect((await doomed.finished).signal).toBe('SIGKILL')

    // The restarted client is answered 409 while the first request is still running…
    const restarted = startNode('src/cli/main.ts', ['request', ...args])
    restarted.child.stdin?.end()
    const saw409 = deferred()
    const watch = (): void => {
      if (/attempt 1: 409/.test(restarted.stderr())) saw409.resolve()
    }
    restarted.child.stderr?.on('data', watch)
    void restarted.finished.then(() => saw409.reject(new Error(`restarted client ended first:\n${restarted.stderr()}`)))
    await saw409.promise

    // …and gets the first request's charge once it completes.
    providerCall.release()
    const result = await restarted.finished
    expect(result.code, result.stderr).toBe(REQUEST_EXIT.ok)
    expect(result.stderr).toMatch(/attempt 1: 409[\s\S]*attempt \d: 201/)
    const body = JSON.parse(result.stdout) as { id: string }
    const charges = await providerCharges(provider.url, user)
    expect(charges).toHaveLength(1)
    expect(gate.keys.filter((key) => key === gate.keys.at(-1))).toHaveLength(1)

    // Running it once more replays the same charge: still one.
    const again = await runRequestCommand(args)
    expect(again.code, again.stderr).toBe(REQUEST_EXIT.ok)
    expect((JSON.parse(again.stdout) as { id: string }).id).toBe(body.id)
    expect(await providerCharges(provider.url, user)).toHaveLength(1)
  })

  it('the same operation with a different body is refused before any request leaves', async () => {
    const user = String(nextUser++)
    const client = createClient({ baseUrl: service.url, keyStore: fileKeyStore(path.join(directory, 'mismatch')), headers: { authorization: `Bearer demo_${user}` } })
    expect((await client.post('/v1/charges', charge, { operationId: 'order:charge' })).status).toBe(201)
    const gateCalls = gate.keys.length
    await expect(client.post('/v1/charges', { ...charge, amount: 2000 }, { operationId: 'order:charge' })).rejects.toMatchObject({ code: 'ONCELY_CLIENT_OPERATION_MISMATCH' })
    expect(gate.keys).toHaveLength(gateCalls)
    expect(await providerCharges(provider.url, user)).toHaveLength(1)
  })
})
