import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 8 } })

describe('any JSON value a step returns round-trips (issue 8, path 10)', () => {
  it.each([
    ['a string holding U+0000', { note: 'a\u0000b', nested: ['\u0000'] }],
    ['a value shaped like the storage wrapper', { 'oncely:json': '{"x":1}' }],
    ['the escape written out', { text: '\\u0000' }],
    ['plain data', { id: 'ch_1', amount: 8, tags: ['a'], none: null }],
  ])('%s: stored, and resumed by a take-over as it was', async (_name, value) => {
    const key = `nul-${_name.replaceAll(' ', '-')}`
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const first = await engine.begin({ scope: 'u1', key, fingerprint })
    if (first.kind !== 'execute') throw new Error(first.kind)
    expect(await first.execution.step('charge', async () => value)).toEqual(value)
    await first.execution.suspend()
    const resumed = await engine.begin({ scope: 'u1', key, fingerprint })
    if (resumed.kind !== 'execute') throw new Error(resumed.kind)
    expect(await resumed.execution.step('charge', async () => 'ran again')).toEqual(value)
    await resumed.execution.complete(jsonResponse(201, '{}'))
  })
})
