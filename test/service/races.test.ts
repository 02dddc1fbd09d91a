import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { providerCharges, startProvider, startService, type TestProcess } from '../helpers/processes.js'
import { newUser, post, type Answer } from './support/api.js'

// Races are at least 20 wide, on real connections started together (docs/conventions.md, Tests).
const WIDTH = 20
let db: TestDatabase
let slowProvider: TestProcess
let fastProvider: TestProcess
let slow: TestProcess
let fast: TestProcess

beforeAll(async () => {
  db = await createTestDatabase()
  ;[slowProvider, fastProvider] = await Promise.all([startProvider({ latencyMs: 300 }), startProvider({ latencyMs: 0 })])
  ;[slow, fast] = await Promise.all([
    startService({ databaseUrl: db.url, schema: db.schema, providerUrl: slowProvider.url, staleAfterMs: 10_000 }),
    startService({ databaseUrl: db.url, schema: db.schema, providerUrl: fastProvider.url, staleAfterMs: 10_000 }),
  ])
})

afterAll(async () => {
  await Promise.all([slow?.stop(), fast?.stop()])
  await Promise.all([slowProvider?.stop(), fastProvider?.stop()])
  await db?.close()
})

async function race(api: string, user: string, key: string): Promise<Answer[]> {
  return Promise.all(Array.from({ length: WIDTH }, () => post(api, { user, key })))
}

function expectOneWinner(answers: Answer[]): void {
  const created = answers.filter((a) => a.status === 201 && a.headers.get('idempotent-replayed') === null)
  const replays = answers.filter((a) => a.status === 201 && a.headers.get('idempotent-replayed') === 'true')
  const conflicts = answers.filter((a) => a.status === 409)
  expect(answers.filter((a) => a.status >= 500)).toEqual([])
  expect(created).toHaveLength(1)
  expect(replays.length + conflicts.length).toBe(WIDTH - 1)
  for (const replay of replays) expect(replay.text).toBe(created[0]?.text)
  for (const conflict of conflicts) expect(conflict.headers.get('retry-after')).toBeTruthy()
}

describe(`${WIDTH} concurrent requests with one key`, () => {
  it('a 300 ms provider call: one 201, the rest 409, exactly one provider charge, no 5xx', async () => {
    const user = newUser()
    const answers = await race(slow.url, user, 'race-slow')
    expectOneWinner(answers)
    expect(answers.filter((a) => a.status === 409).length).toBeGreaterThan(0)
    expect(await providerCharges(slowProvider.url, user)).toHaveLength(1)
  })

  it('an instant provider call: one 201, the rest 409 or replays, exactly one provider charge, no 5xx', async () => {
    const user = newUser()
    const answers = await race(fast.url, user, 'race-fast')
    expectOneWinner(answers)
    expect(await providerCharges(fastProvider.url, user)).toHaveLength(1)
  })

  it('two API processes on one database, one key: still one winner and one charge', async () => {
    const user = newUser()
    // Each service has its own provider, so the charges of both are counted.
    const answers = await Promise.all(
      Array.from({ length: WIDTH }, (_, i) => post(i % 2 === 0 ? slow.url : fast.url, { user, key: 'race-two-apis' })),
    )
    expectOneWinner(answers)
    const charges = [...(await providerCharges(slowProvider.url, user)), ...(await providerCharges(fastProvider.url, user))]
    expect(charges).toHaveLength(1)
  })
})
