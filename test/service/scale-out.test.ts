import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { providerCharges, startProvider, startService, type TestProcess } from '../helpers/processes.js'
import { newUser, post, type Answer } from './support/api.js'
import { startGate, type Gate } from './support/gate.js'

// Issue 24, point 6 (docs/scale-out.md): several API processes on one database, as a horizontally
// scaled deployment runs them. The database alone decides between them; no process knows the
// others. Races are at least 20 wide (docs/conventions.md, Tests).
const PROCESSES = 3
const WIDTH = 21
const KEYS = 3

let db: TestDatabase
let provider: TestProcess
let gate: Gate
let apis: TestProcess[] = []

beforeAll(async () => {
  // Up to four services at once (the doomed one beside the three), a pool of 20 each.
  db = await createTestDatabase({ connections: 90 })
  provider = await startProvider()
  // One provider behind one gate for every process, so each charge is counted once, whoever made it.
  gate = await startGate(provider.url)
  apis = await Promise.all(
    Array.from({ length: PROCESSES }, () => startService({ databaseUrl: db.url, schema: db.schema, providerUrl: gate.url, staleAfterMs: 3000 })),
  )
  await Promise.all(apis.map(warmPool))
}, 60_000)

/**
 * Opens a process's pool before the races: a cold pool asked for twenty connections at once, on a
 * loaded 2-core CI machine, can take longer than the service's connection timeout (1 s), and a
 * request that gets none is answered 503 "retry with the same key" (seen once in CI, and under
 * load with the build before issue 21's claim change too). That is overload, not the race between
 * processes this file is about. A warm-up request answered 503 is sent again, as a client would;
 * so is one answered 409: the claim of an attempt answered 503 may have committed after the
 * service stopped waiting for it, and is let go in the background (seen once in CI: the retry
 * 200 ms later met it still held, `retry_same_key: true`). Up to 25 attempts, 5 s: ten, 2 s, ran
 * out once on a machine that ran benchmarks beside the suite (seen: 409 to the last).
 */
async function warmPool(api: TestProcess): Promise<void> {
  const user = newUser()
  await Promise.all(
    Array.from({ length: WIDTH }, async (_, i) => {
      for (let attempt = 1; ; attempt++) {
        const answer = await post(api.url, { user, key: `warm-${i}` })
        if (answer.status === 201) return
        if ((answer.status !== 503 && answer.status !== 409) || attempt === 25) throw new Error(`warming ${api.url}: ${answer.status} ${answer.text}`)
        await new Promise((resolve) => setTimeout(resolve, 200))
      }
    }),
  )
}

afterAll(async () => {
  await Promise.all(apis.map((api) => api.stop()))
  await gate?.close()
  await provider?.stop()
  await db?.close()
})

const created = (answers: Answer[]) => answers.filter((a) => a.status === 201 && a.headers.get('idempotent-replayed') === null)

describe(`${PROCESSES} API processes on one database`, () => {
  it(`${KEYS} keys, each sent ${WIDTH} times at once across every process: one provider charge and one charge row per key, no 5xx`, async () => {
    const user = newUser()
    const keys = Array.from({ length: KEYS }, (_, k) => `scale-out-${k}`)
    const answers = await Promise.all(
      keys.flatMap((key) => Array.from({ length: WIDTH }, (_, i) => post(apis[i % PROCESSES]!.url, { user, key }).then((answer) => ({ key, answer })))),
    )
    expect(answers.filter(({ answer }) => answer.status >= 500).map(({ answer }) => answer.text)).toEqual([])
    for (const key of keys) {
      const forKey = answers.filter((a) => a.key === key).map((a) => a.answer)
      expect(created(forKey)).toHaveLength(1)
      for (const other of forKey.filter((a) => a !== created(forKey)[0])) {
        if (other.status === 201) expect(other.text).toBe(created(forKey)[0]!.text)
        else expect(other.status).toBe(409)
      }
    }
    expect(await providerCharges(provider.url, user)).toHaveLength(KEYS)
    const { rows } = await db.pool.query<{ idempotency_key: string; count: number }>(
      'SELECT idempotency_key, count(*)::integer AS count FROM oncely_reference.charges WHERE user_id = $1 GROUP BY idempotency_key ORDER BY idempotency_key',
      [user],
    )
    expect(rows).toEqual(keys.map((key) => ({ idempotency_key: key, count: 1 })))
  })

  it('a key completed through one process is replayed, byte for byte, by every process', async () => {
    const user = newUser()
    const first = await post(apis[0]!.url, { user, key: 'scale-out-replay' })
    expect(first.status).toBe(201)
    const replays = await Promise.all(apis.map((api) => post(api.url, { user, key: 'scale-out-replay' })))
    for (const replay of replays) {
      expect(replay.status).toBe(201)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(replay.text).toBe(first.text)
    }
    expect(await providerCharges(provider.url, user)).toHaveLength(1)
  })

  it('a process killed during the provider call: another process takes the claim over and resumes with the same provider key, one charge', async () => {
    const user = newUser()
    const doomed = await startService({ databaseUrl: db.url, schema: db.schema, providerUrl: gate.url, staleAfterMs: 3000 })
    const held = gate.holdNext()
    const keysBefore = gate.keys.length
    const lost = post(doomed.url, { user, key: 'scale-out-kill' }).catch((error: unknown) => error)
    await held.arrived
    doomed.child.kill('SIGKILL')
    await doomed.exited
    await lost
    // The charge the dead process sent reaches the provider now: it happened, nobody heard of it.
    held.release()
    // Another process answers 409 while the dead claim's lease is fresh, then takes it over.
    let answer = await post(apis[1]!.url, { user, key: 'scale-out-kill' })
    while (answer.status === 409) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      answer = await post(apis[1]!.url, { user, key: 'scale-out-kill' })
    }
    expect(answer.status).toBe(201)
    expect(gate.keys.slice(keysBefore)).toHaveLength(2)
    expect(new Set(gate.keys.slice(keysBefore)).size).toBe(1)
    expect(await providerCharges(provider.url, user)).toHaveLength(1)
    const replay = await post(apis[2]!.url, { user, key: 'scale-out-kill' })
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(replay.text).toBe(answer.text)
  }, 60_000)
})
