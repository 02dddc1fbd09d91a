import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newUser } from '../service/support/api.js'
import { badAnswers, exactlyOnceViolations, keysOf, send, settleKeys, startFaultBed, type FaultBed, type Sent } from './support/fault-bed.js'

// Issue 8, database faults (c): an ACCESS EXCLUSIVE lock held on the idempotency table for 5 s
// (a migration, a VACUUM FULL, an operator's mistake) while 50 keys arrive. How the server queues
// lock waiters and applies lock_timeout is the server's own, so this runs on every PostgreSQL.
// The lock is held at least 5 s, and on until every arriving request is answered (at most 30 s):
// a request that waited for the lock holder is never answered while it holds the lock, however
// slow the machine, while one that gives up at its lock timeout is, however loaded.
let bed: FaultBed
const LOCK_HELD_MS = 5_000
const LOCK_HELD_AT_MOST_MS = 30_000

beforeAll(async () => {
  bed = await startFaultBed('lock')
})

afterAll(async () => {
  await bed?.close()
})

describe('an ACCESS EXCLUSIVE lock on the idempotency table for 5 s and more', () => {
  it('no request waits for the lock holder; 503 + Retry-After meanwhile; every key ends charged once after', { timeout: 90_000 }, async () => {
    const user = newUser()
    const inStep = keysOf('lock-step', 10)
    const arriving = keysOf('lock-new', 50)

    // Ten requests claimed and inside their provider call when the lock is taken: their phase
    // commit, completion and suspend all meet the lock.
    bed.gate.hold(inStep.length)
    const stepping = inStep.map((key) => send(bed, user, key))
    await bed.gate.waiting(inStep.length)

    await bed.admin.query('BEGIN')
    await bed.admin.query(`LOCK TABLE ${bed.keyTable} IN ACCESS EXCLUSIVE MODE`)
    const lockedAt = performance.now()
    bed.gate.release()
    let releasedAt = Number.POSITIVE_INFINITY
    const answeredAt = new Map<string, number>()
    const track = async (sent: Promise<Sent>) => {
      const done = await sent
      answeredAt.set(done.key, performance.now())
      return done
    }
    const arrivals = arriving.map((key) => track(send(bed, user, key)))
    const inFlight = [...stepping.map(track), ...arrivals]
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms - (performance.now() - lockedAt))))
    try {
      await Promise.all([sleep(LOCK_HELD_MS), Promise.race([Promise.all(arrivals), sleep(LOCK_HELD_AT_MOST_MS)])])
    } finally {
      await bed.admin.query('COMMIT')
      releasedAt = performance.now()
    }

    const answers = await Promise.all(inFlight)
    // No new request waited for the lock holder: each was answered while the lock was held.
    const waitedForTheLock = arriving
      .filter((key) => (answeredAt.get(key) ?? Number.POSITIVE_INFINITY) >= releasedAt)
      .map((key) => `${key}: answered only after the lock was released`)
    const settled = await settleKeys(bed, user, [...inStep, ...arriving])
    // One list, so a failure shows every broken promise at once.
    expect([...badAnswers(answers), ...waitedForTheLock, ...(await exactlyOnceViolations(bed, user, settled))]).toEqual([])
  })
})
