import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const worker = fileURLToPath(new URL('./fixtures/crash-worker.ts', import.meta.url))

describe('a crash between steps (real process, SIGKILL)', () => {
  it('resumes at the recovery point with the same derived key, never re-running a committed step', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', worker, db.url, db.schema, 'crash-1'], { stdio: ['ignore', 'pipe', 'inherit'] })
    const [line] = (await once(createInterface({ input: child.stdout }), 'line')) as [string]
    const inFlight = JSON.parse(line) as { providerKey: string; claimId: string }
    child.kill('SIGKILL')
    await once(child, 'exit')

    const { engine } = engineOn(db, { staleAfterMs: 1000 })
    // The dead worker's lease is fresh: a retry gets a conflict until the claim goes stale.
    expect((await engine.begin({ scope: 'u1', key: 'crash-1', fingerprint: 'crash-fingerprint' })).kind).toBe('conflict')
    await ageClaim(db, 'u1', 'crash-1')
    const decision = await engine.begin({ scope: 'u1', key: 'crash-1', fingerprint: 'crash-fingerprint' })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    const { execution } = decision
    expect(execution.how).toBe('take-over')
    expect(execution.claimId).toBe(inFlight.claimId)
    expect(execution.recoveryPoint).toBe('reserve')

    let reserveRan = false
    const reservation = await execution.step('reserve', async () => {
      reserveRan = true
      return { reservation: 'r_2' }
    })
    expect(reserveRan).toBe(false)
    expect(reservation).toMatchObject({ reservation: 'r_1', pid: child.pid })
    const keyPassedOn = await execution.step('charge', async ({ providerKey }) => providerKey)
    expect(keyPassedOn).toBe(inFlight.providerKey)
    await execution.complete(jsonResponse(201, '{}'))
  })
})
