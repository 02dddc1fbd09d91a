import pg from 'pg'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { peerFigures, type PeerCell } from '../../bench/peers-report.js'
import type { LoadRun } from '../../bench/http-load.js'
import { startCli, startProgram, type BenchProcess } from '../../bench/processes.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// The bench's lean durable baseline (issue 21) is only a fair floor if it does the durable work
// it claims: a key claimed before the provider is called, one charge however often the request
// comes, the answer, the charge row and the event committed together. Its speed is never
// asserted (docs/conventions.md, "Benchmarks are not tests").

const LEAN_APP = new URL('../../bench/baselines/lean-durable.ts', import.meta.url).pathname
const BODY = '{"amount":1000,"currency":"usd","customer":"cus_lean"}'

let db: TestDatabase
let provider: BenchProcess
let lean: BenchProcess
let sql: pg.Pool
let schema: string
beforeAll(async () => {
  db = await createTestDatabase()
  schema = `${db.schema}_lean`.toLowerCase().replace(/[^a-z0-9_]/g, '_')
  provider = await startCli(['provider', '--port', '0', '--latency-ms', '0'])
  lean = await startProgram(LEAN_APP, ['--port', '0', '--provider-url', provider.url, '--database-url', db.url, '--schema', schema])
  sql = new pg.Pool({ connectionString: db.url, max: 2 })
}, 120_000)
afterAll(async () => {
  await lean?.stop()
  await provider?.stop()
  await sql?.end()
  await db?.close()
})

const charge = (key: string, body = BODY) =>
  fetch(`${lean.url}/v1/charges`, { method: 'POST', headers: { authorization: 'Bearer demo_7', 'content-type': 'application/json', 'idempotency-key': key }, body }).then(async (res) => ({ status: res.status, text: await res.text() }))

const count = async (table: string, where = 'true') => Number((await sql.query<{ n: string }>(`SELECT count(*) AS n FROM ${schema}.${table} WHERE ${where}`)).rows[0]?.n)

it('charges once, commits the answer, the charge row and the event together, and replays the stored answer', async () => {
  const first = await charge('lean-1')
  expect(first.status).toBe(201)
  const again = await charge('lean-1')
  expect(again).toEqual(first)
  expect(await count('charges', `idempotency_key = 'lean-1'`)).toBe(1)
  expect(await count('outbox')).toBe(1)
  const row = (await sql.query<{ status: string; response_body: string }>(`SELECT status, response_body FROM ${schema}.keys WHERE key = 'lean-1'`)).rows[0]
  expect(row).toEqual({ status: 'completed', response_body: first.text })
})

it('answers 422 to the key sent with another body, and 409 or the same charge to a duplicate sent at once', async () => {
  expect((await charge('lean-1', '{"amount":2000,"currency":"usd","customer":"cus_lean"}')).status).toBe(422)
  const together = await Promise.all(Array.from({ length: 8 }, () => charge('lean-2')))
  const created = together.filter((answer) => answer.status === 201)
  expect(created.length).toBeGreaterThan(0)
  expect(new Set(created.map((answer) => answer.text)).size).toBe(1)
  expect(together.every((answer) => answer.status === 201 || answer.status === 409)).toBe(true)
  expect(await count('charges', `idempotency_key = 'lean-2'`)).toBe(1)
})

it('is reported beside plain Express and the service, as a floor and not as a target', () => {
  const run = (perSecond: number): LoadRun => ({ perSecond, requests: perSecond, cpuMsPerRequest: 1, mainThreadCpuMsPerRequest: 1, writesPerRequest: 1, databaseCpuMsPerRequest: 1, p50: 1, p99: 1 })
  const cells: PeerCell[] = [
    { target: 'express', cell: 'fresh', runs: [run(1000)] },
    { target: 'lean durable', cell: 'fresh', runs: [run(500)] },
    { target: 'service', cell: 'fresh', runs: [run(100)] },
    { target: 'lean durable', cell: 'replay', runs: [run(800)] },
    { target: 'service', cell: 'replay', runs: [run(400)] },
  ]
  const { targets } = peerFigures(cells, 32)
  for (const [name, ratio] of [
    ['lean durable fresh ÷ express fresh', 0.5],
    ['service fresh ÷ lean durable fresh', 0.2],
    ['service replay ÷ lean durable replay', 0.5],
  ] as const) {
    const floor = targets.find((f) => f.name === name)
    expect(floor?.ratio, name).toBe(ratio)
    expect(floor?.target, name).toBeUndefined()
  }
})
