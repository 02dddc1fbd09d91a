import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintOperation, requestFingerprint } from '../../src/client/index.js'
import type { StepContext } from '../../src/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse } from '../helpers/engine.js'

// The old names stay for one release as aliases of the new ones (docs/conventions.md, Names).
// This file is the one place that uses them on purpose.
/* eslint-disable @typescript-eslint/no-deprecated */

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('deprecated aliases', () => {
  it('requestFingerprint is fingerprintOperation', () => {
    expect(requestFingerprint).toBe(fingerprintOperation)
    const url = 'http://127.0.0.1:3000/v1/charges'
    expect(requestFingerprint('POST', url, { amount: 1 })).toBe(fingerprintOperation('POST', url, { amount: 1 }))
  })

  it("a step's idempotencyKey is its providerKey, the key derived for the provider", async () => {
    const { engine } = engineOn(db)
    const decision = await engine.begin({ scope: 'u1', key: 'alias-1', fingerprint: 'f' })
    if (decision.kind !== 'execute') throw new Error(decision.kind)
    const { execution } = decision
    const context = await execution.step('charge', (seen: StepContext) => ({ ...seen }))
    expect(context.providerKey).toBe(execution.stepKey('charge'))
    expect(context.idempotencyKey).toBe(context.providerKey)
    expect(context.providerKey).not.toBe('alias-1')
    await execution.complete(jsonResponse(201, '{}'))
  })
})
