import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newUser } from '../service/support/api.js'
import {
  badAnswers,
  exactlyOnceViolations,
  keysOf,
  send,
  serviceWaitsOnLocks,
  settleKeys,
  startFaultBed,
  terminateServiceBackends,
  type FaultBed,
  type Sent,
} from './support/fault-bed.js'

// Issue 8, database faults (a): every backend of the service terminated mid-flight with
// pg_terminate_backend, as an operator or a failover does. What the client sees (57P01 as an
// error message, then a closed socket) is the server's doing, so this runs on every PostgreSQL.
let bed: FaultBed

beforeAll(async () => {
  bed = await startFaultBed('terminated')
})

afterAll(async () => {
  await bed?.close()
})

describe('every backend of the service terminated mid-flight', () => {
  it('during the completion transactions: no hang, no 500, every key ends charged once', { timeout: 60_000 }, async () => {
    const user = newUser()
    const keys = keysOf('terminated-done', 10)
    // Each request waits at the provider, then, let through together, on its charge row's INSERT
    // (the table is locked): every backend of the service is terminated inside a completion
    // transaction, before the service's lock_timeout ends the wait.
    bed.gate.hold(keys.length)
    const inFlight = keys.map((key) => send(bed, user, key))
    await bed.gate.waiting(keys.length)
    await bed.admin.query('BEGIN')
    await bed.admin.query('LOCK TABLE oncely_reference.charges IN ACCESS EXCLUSIVE MODE')
    bed.gate.release()
    try {
      // Half is enough: under load the service's 1 s lock_timeout may end the first waits before
      // the last request arrives, and a retried statement waits again.
      await serviceWaitsOnLocks(bed, Math.ceil(keys.length / 2))
      expect(await terminateServiceBackends(bed)).toBeGreaterThanOrEqual(Math.ceil(keys.length / 2))
    } finally {
      await bed.admin.query('COMMIT')
    }
    const answers = await Promise.all(inFlight)
    const settled = await settleKeys(bed, user, keys)
    expect([...badAnswers(answers), ...(await exactlyOnceViolations(bed, user, settled))]).toEqual([])
  })

  it('again and again while 30 keys run: no hang, no 500, every key ends charged once', { timeout: 60_000 }, async () => {
    const user = newUser()
    const keys = keysOf('terminated-storm', 30)
    const inFlight: Array<Promise<Sent>> = []
    // Terminations at every point of a request (claim, phase commit, completion, suspend), for as
    // long as the requests keep arriving.
    for (const key of keys) {
      inFlight.push(send(bed, user, key))
      await terminateServiceBackends(bed)
      await new Promise((resolve) => setTimeout(resolve, 30))
    }
    const answers = await Promise.all(inFlight)
    const settled = await settleKeys(bed, user, keys)
    expect([...badAnswers(answers), ...(await exactlyOnceViolations(bed, user, settled))]).toEqual([])
  })
})
