import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { providerCharges, startProvider, startService, type ServiceOptions, type TestProcess } from '../helpers/processes.js'
import { newUser, post, type Answer } from '../service/support/api.js'

// Crashes are real (docs/conventions.md, Tests). CHAOS=1 lets a request kill the API with SIGKILL at a named
// point; a second API process on the same database takes the retries at once, so the 409s before
// the claim goes stale are observed, not timed; then the killed one is restarted.
const STALE_AFTER_MS = 1500
let db: TestDatabase
let provider: TestProcess
let options: ServiceOptions

beforeAll(async () => {
  db = await createTestDatabase()
  provider = await startProvider()
  options = { databaseUrl: db.url, schema: db.schema, providerUrl: provider.url, staleAfterMs: STALE_AFTER_MS, chaos: true }
})

afterAll(async () => {
  await provider?.stop()
  await db?.close()
})

/** Retries like a client would, honouring Retry-After (capped), until the answer is not 409. */
async function retryUntilDone(api: string, user: string, key: string): Promise<Answer[]> {
  const answers: Answer[] = []
  for (let attempt = 0; attempt < 40; attempt++) {
    const answer = await post(api, { user, key })
    answers.push(answer)
    if (answer.status !== 409) return answers
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  return answers
}

describe.each(['after-claim', 'after-provider'] as const)('the API is SIGKILLed %s', (point) => {
  it('retries get 409 until the claim is stale, then exactly one finishes; the provider has one charge', async () => {
    const user = newUser()
    const key = `crash-${point}`
    const doomed = await startService(options)
    const survivor = await startService(options)
    try {
      const crashed = await post(doomed.url, { user, key, headers: { 'x-chaos-crash': point } }).then(
        (answer) => answer,
        (error: unknown) => error,
      )
      expect(crashed).toBeInstanceOf(Error)
      expect((await doomed.exited).signal).toBe('SIGKILL')
      expect(await providerCharges(provider.url, user)).toHaveLength(point === 'after-claim' ? 0 : 1)

      const first = await post(survivor.url, { user, key })
      expect(first.status).toBe(409)
      expect(first.headers.get('retry-after')).toBeTruthy()

      // Once stale, a burst of retries: exactly one takes the claim over and finishes.
      const answers = await retryUntilDone(survivor.url, user, key)
      expect(answers.filter((a) => a.status >= 500)).toEqual([])
      const done = answers.at(-1)
      expect(done?.status).toBe(201)
      expect(done?.headers.get('idempotent-replayed')).toBeNull()
      expect(await providerCharges(provider.url, user)).toHaveLength(1)

      const restarted = await startService(options)
      try {
        const replay = await post(restarted.url, { user, key })
        expect(replay.status).toBe(201)
        expect(replay.text).toBe(done?.text)
        expect(replay.headers.get('idempotent-replayed')).toBe('true')
      } finally {
        await restarted.stop()
      }
      expect(await providerCharges(provider.url, user)).toHaveLength(1)
    } finally {
      await Promise.all([doomed.stop(), survivor.stop()])
    }
  })
})

describe('concurrent retries of a stale claim', () => {
  it('exactly one takes it over; the others get 409 or the replay', async () => {
    const user = newUser()
    const key = 'crash-burst'
    const doomed = await startService(options)
    const survivor = await startService(options)
    try {
      await post(doomed.url, { user, key, headers: { 'x-chaos-crash': 'after-provider' } }).catch(() => undefined)
      await doomed.exited
      // Wait out the stale threshold: it is the behaviour under test.
      await new Promise((resolve) => setTimeout(resolve, STALE_AFTER_MS + 300))
      const answers = await Promise.all(Array.from({ length: 20 }, () => post(survivor.url, { user, key })))
      expect(answers.filter((a) => a.status >= 500)).toEqual([])
      const created = answers.filter((a) => a.status === 201 && a.headers.get('idempotent-replayed') === null)
      expect(created).toHaveLength(1)
      expect(answers.every((a) => a.status === 201 || a.status === 409)).toBe(true)
      expect(await providerCharges(provider.url, user)).toHaveLength(1)
    } finally {
      await Promise.all([doomed.stop(), survivor.stop()])
    }
  })
})

describe('the broken claim-in-transaction strategy (kept to reproduce the article)', () => {
  it('charges twice after a crash between the provider call and the commit', async () => {
    const user = newUser()
    const broken = { ...options, strategy: 'claim-in-transaction' }
    const doomed = await startService(broken)
    try {
      await post(doomed.url, { user, key: 'naive-crash', headers: { 'x-chaos-crash': 'after-provider' } }).catch(() => undefined)
      expect((await doomed.exited).signal).toBe('SIGKILL')
    } finally {
      await doomed.stop()
    }
    const restarted = await startService(broken)
    try {
      expect((await post(restarted.url, { user, key: 'naive-crash' })).status).toBe(201)
    } finally {
      await restarted.stop()
    }
    expect(await providerCharges(provider.url, user)).toHaveLength(2)
  })
})
