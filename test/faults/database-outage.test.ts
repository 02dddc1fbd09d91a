import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { versionIndependentPass } from '../helpers/test-passes.js'
import { newUser } from '../service/support/api.js'
import { badAnswers, exactlyOnceViolations, keysOf, send, serviceWaitsOnLocks, settleKeys, startFaultBed, type FaultBed, type Sent } from './support/fault-bed.js'

// Issue 8, database faults (b): the database goes away for about a second and comes back with
// requests in flight. A proxy the test owns stands for the server (the machine's PostgreSQL is
// shared and never stopped): it cuts every connection and refuses new ones, then accepts again.
// This is the client side of a restart (sockets die, connects are refused), the same on every
// PostgreSQL version, so it runs in one of CI's two passes (test/helpers/test-passes.ts).
let bed: FaultBed

beforeAll(async () => {
  if (versionIndependentPass) bed = await startFaultBed('outage')
})

afterAll(async () => {
  await bed?.close()
})

describe.skipIf(!versionIndependentPass)('the database down for a second with requests in flight', () => {
  it('answers 503 + Retry-After while it is down, never hangs, and every key ends charged once within 30 s of its return', { timeout: 90_000 }, async () => {
    const user = newUser()
    const inStep = keysOf('outage-step', 10)
    const inCompletion = keysOf('outage-done', 10)
    const whileDown = keysOf('outage-new', 5)

    // Twenty requests claimed and inside their provider call (held at the gate).
    bed.gate.hold(inStep.length + inCompletion.length)
    const completing = inCompletion.map((key) => send(bed, user, key))
    await bed.gate.waiting(inCompletion.length)
    const stepping = inStep.map((key) => send(bed, user, key))
    await bed.gate.waiting(inStep.length + inCompletion.length)

    // Ten of them let through, into their completion transaction: the service's charges table is
    // locked, so each waits on its INSERT (within the service's lock_timeout).
    await bed.admin.query('BEGIN')
    await bed.admin.query('LOCK TABLE oncely_reference.charges IN ACCESS EXCLUSIVE MODE')
    bed.gate.releaseFirst(inCompletion.length)
    // Half is enough: under load the service's 1 s lock_timeout may end the first waits before
    // the last request arrives.
    await serviceWaitsOnLocks(bed, Math.ceil(inCompletion.length / 2))

    // The database goes away: every connection cut, new ones refused.
    bed.proxy.cut()
    await bed.admin.query('COMMIT')
    bed.gate.release()
    const downAt = performance.now()
    const duringOutage: Sent[] = []
    for (const key of whileDown) duringOutage.push(await send(bed, user, key))
    const stillDown = performance.now() - downAt
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, 1000 - stillDown)))
    bed.proxy.restore()

    const inFlight = await Promise.all([...stepping, ...completing])
    // Asked while it was down, the service says so and when to come back.
    const notUnavailable = stillDown > 1000 ? [] : duringOutage.filter((sent) => !('answer' in sent) || sent.answer.status !== 503).map((sent) => `${sent.key}: not a 503 while the database was down`)
    const settled = await settleKeys(bed, user, [...inStep, ...inCompletion, ...whileDown])
    // One list, so a failure shows every broken promise at once.
    expect([...badAnswers([...inFlight, ...duringOutage]), ...notUnavailable, ...(await exactlyOnceViolations(bed, user, settled))]).toEqual([])
  })
})
