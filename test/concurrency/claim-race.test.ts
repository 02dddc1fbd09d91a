import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { fingerprintRequest, type Decision } from '../../src/index.js'
import type { Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, raceEngines } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  // 50 engines on a connection each, beside the file's pool.
  db = await createTestDatabase({ connections: 60 })
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })

function kinds(decisions: Decision<Queryable>[]): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const decision of decisions) counts[decision.kind] = (counts[decision.kind] ?? 0) + 1
  return counts
}

describe('claim race', () => {
  it('50 callers begin one key at once: exactly one executes, every other gets a conflict', async () => {
    const race = await raceEngines(db, 50, {}, (engine) => engine.begin({ scope: 'u1', key: 'race-50', fingerprint }))
    onTestFinished(() => race.close())
    expect(kinds(race.results)).toEqual({ execute: 1, conflict: 49 })
    for (const decision of race.results) if (decision.kind === 'execute') await decision.execution.release()
  })

  it('50 callers race on a completed key: all replay the same bytes', async () => {
    const { engine } = engineOn(db)
    const first = await engine.begin({ scope: 'u1', key: 'race-replay', fingerprint })
    if (first.kind !== 'execute') throw new Error(`expected execute, got ${first.kind}`)
    await first.execution.complete(jsonResponse(201, '{"id":"ch_1"}'))
    const race = await raceEngines(db, 50, {}, (e) => e.begin({ scope: 'u1', key: 'race-replay', fingerprint }))
    await race.close()
    expect(kinds(race.results)).toEqual({ replay: 50 })
  })

  it('20 callers find one stale claim at once: exactly one takes it over, and the old owner is fenced out', async () => {
    // The first worker renews its lease rarely; it stands for a worker that died.
    const { engine: oldWorker } = engineOn(db, { staleAfterMs: 60_000 })
    const crashed = await oldWorker.begin({ scope: 'u1', key: 'stale-20', fingerprint })
    if (crashed.kind !== 'execute') throw new Error('expected execute')
    await ageClaim(db, 'u1', 'stale-20')
    const race = await raceEngines(db, 20, { staleAfterMs: 1000 }, (e) => e.begin({ scope: 'u1', key: 'stale-20', fingerprint }))
    onTestFinished(() => race.close())
    expect(kinds(race.results)).toEqual({ execute: 1, conflict: 19 })
    const winner = race.results.find((d) => d.kind === 'execute')
    if (winner?.kind !== 'execute') throw new Error('no winner')
    expect(winner.execution.how).toBe('take-over')
    expect(winner.execution.claimId).toBe(crashed.execution.claimId)
    expect(winner.execution.fenceToken).not.toBe(crashed.execution.fenceToken)
    await expect(crashed.execution.complete(jsonResponse(201, '{}'))).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
    await winner.execution.release()
  })
})
