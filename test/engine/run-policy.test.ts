import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, isOncelyError, type Engine } from '../../src/index.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { jsonResponse, keyTable } from '../helpers/engine.js'

// engine.run and the failure policy, and the scope's rules (issue 13: the mutants these kill
// survived the rest of the suite).
let db: TestDatabase
let engine: Engine<Queryable>
beforeAll(async () => {
  db = await createTestDatabase()
  engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }) })
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 13 } })
const rowOf = async (key: string) =>
  (await db.pool.query<{ status: string; fence_token: string | null }>(`SELECT status, fence_token FROM ${keyTable(db)} WHERE key = $1`, [key])).rows[0]

describe('engine.run when the handler throws', () => {
  it('before any step: the error is thrown again and the key released, free for a new request', async () => {
    const failure = new Error('validation failed')
    await expect(engine.run({ scope: 'u1', key: 'throws-early', fingerprint }, async () => Promise.reject(failure))).rejects.toBe(failure)
    expect(await rowOf('throws-early')).toBeUndefined()
  })

  it('after a step: the error is thrown again and the claim suspended for the retry to resume', async () => {
    const failure = new Error('provider timed out')
    const handler = async (execution: { step(name: string, fn: () => Promise<unknown>): Promise<unknown> }) => {
      await execution.step('charge', async () => ({ id: 'ch_1' }))
      throw failure
    }
    await expect(engine.run({ scope: 'u1', key: 'throws-late', fingerprint }, handler)).rejects.toBe(failure)
    expect(await rowOf('throws-late')).toEqual({ status: 'in_progress', fence_token: null })
  })

  it('a policy that suspends before any step: the claim is kept for the retry, not released', async () => {
    const failure = new Error('unsure whether the provider saw it')
    await expect(
      engine.run({ scope: 'u1', key: 'suspended-early', fingerprint }, async () => Promise.reject(failure), { onFailure: () => ({ action: 'suspend' }) }),
    ).rejects.toBe(failure)
    expect(await rowOf('suspended-early')).toEqual({ status: 'in_progress', fence_token: null })
  })

  it('a policy that stores a response: run answers with it and retries replay it', async () => {
    const response = jsonResponse(402, '{"declined":true}')
    const result = await engine.run({ scope: 'u1', key: 'declined', fingerprint }, async () => Promise.reject(new Error('card declined')), {
      onFailure: () => ({ action: 'store', response }),
    })
    expect(result).toEqual({ kind: 'executed', response })
    expect((await rowOf('declined'))?.status).toBe('failed')
    const replay = await engine.begin({ scope: 'u1', key: 'declined', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"declined":true}')
  })

  it('after the handler completed the execution itself: the policy is not asked, the error is thrown, the stored response stays', async () => {
    let asked = 0
    const failure = new Error('logging failed after the response')
    const run = engine.run(
      { scope: 'u1', key: 'completed-then-threw', fingerprint },
      async (execution) => {
        await execution.complete(jsonResponse(201, '{"done":true}'))
        throw failure
      },
      { onFailure: () => (asked++, { action: 'release' }) },
    )
    await expect(run).rejects.toBe(failure)
    expect(asked).toBe(0)
    expect((await rowOf('completed-then-threw'))?.status).toBe('completed')
  })

  it('a handler that completed the execution itself and returns: run answers, the first completion stays', async () => {
    const result = await engine.run({ scope: 'u1', key: 'completed-then-returned', fingerprint }, async (execution) => {
      await execution.complete(jsonResponse(201, '{"first":true}'))
      return jsonResponse(200, '{"second":true}')
    })
    expect(result.kind).toBe('executed')
    const replay = await engine.begin({ scope: 'u1', key: 'completed-then-returned', fingerprint })
    expect(replay.kind === 'replay' && Buffer.from(replay.response.body).toString()).toBe('{"first":true}')
  })
})

describe('the scope', () => {
  it('a number is its decimal string: 42 and "42" are one scope', async () => {
    const first = await engine.run({ scope: 42, key: 'numeric-scope', fingerprint }, async () => jsonResponse(201, '{}'))
    expect(first.kind).toBe('executed')
    expect((await engine.begin({ scope: '42', key: 'numeric-scope', fingerprint })).kind).toBe('replay')
  })

  it('an empty string, a number that is not finite or anything else is refused before the claim, saying what it got', async () => {
    const refusal = async (scope: unknown) => {
      const error = await engine.begin({ scope: scope as string, key: 'bad-scope', fingerprint }).catch((e: unknown) => e)
      expect(isOncelyError(error, 'ONCELY_INVALID_SCOPE')).toBe(true)
      return (error as Error).message
    }
    expect(await refusal('')).toBe('the scope must be a non-empty string or a finite number; got an empty string')
    expect(await refusal(Number.NaN)).toBe('the scope must be a non-empty string or a finite number; got number')
    expect(await refusal(Number.POSITIVE_INFINITY)).toMatch(/got number$/)
    expect(await refusal(undefined)).toMatch(/got undefined$/)
    expect(await rowOf('bad-scope')).toBeUndefined()
  })
})
