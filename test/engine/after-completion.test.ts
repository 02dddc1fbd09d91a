import { describe, expect, it } from 'vitest'
import { fingerprintRequest, isOncelyError, type WriteStatement } from '../../src/index.js'
import { withTransaction } from '../../src/store/postgres/index.js'
import { useChargesDatabase } from '../helpers/completion.js'
import { engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'
import { killInsideStep } from './fixtures/kill-inside-step.js'

// Issue 21: `execution.afterCompletion(name, run)` is an at-most-once send whose record is the
// completion's own commit: no mark of its own, so the reference service's fresh charge is the
// claim and the completion's flight, two round trips and two commits (DESIGN.md, "Cost budget").

const world = useChargesDatabase()
const { setup, charges, status } = world

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 4 } })
const insertCharge = (id: string): WriteStatement => ({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] })
const verbs = (statements: string[]) => statements.map((s) => s.split(/[ ;]/)[0]!)

describe('execution.afterCompletion', () => {
  it("the reference service's shape: the claim, then one flight; the receipt is sent once that flight committed, before complete resolves", async () => {
    const { pool, engine, outbox } = setup(true)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'after-service', fingerprint }))
    const charge = await execution.step('charge', ({ providerKey }) => ({ id: `ch_${providerKey.slice(0, 8)}` }), { commit: 'with-next-write' })
    const seenBySend: Array<string | undefined> = []
    execution.afterCompletion('receipt', async () => {
      seenBySend.push(await status('after-service'))
    })
    const event = await outbox.prepareEnqueue({ type: 'charge.succeeded', key: 'cus_1', payload: charge })
    await execution.complete(jsonResponse(201, JSON.stringify(charge)), { statements: [insertCharge(charge.id), event.statement] })
    // Sent after the commit (the row it read was completed), and before complete resolved.
    expect(seenBySend).toEqual(['completed'])
    expect(verbs(pool.statements)).toEqual(['WITH', 'BEGIN', 'WITH', 'INSERT', 'WITH', 'COMMIT'])
    expect(pool.roundTrips()).toBe(2)
    expect(await charges(charge.id)).toBe(1)
  })

  it('a worker SIGKILLed inside the send, after the commit: the retry replays the outcome, and the send is not made again', async () => {
    await world.db.pool.query('CREATE TABLE IF NOT EXISTS provider_calls (n serial PRIMARY KEY, provider_key text NOT NULL, step text NOT NULL)')
    const dead = await killInsideStep(world.db, 'after-killed', 'after-completion')
    const { engine } = engineOn(world.db)
    const retry = await engine.begin({ scope: 'u1', key: 'after-killed', fingerprint: 'step-worker' })
    expect(retry.kind === 'replay' && Buffer.from(retry.response.body).toString()).toBe('{"sent":"once"}')
    const { rows } = await world.db.pool.query<{ provider_key: string }>(`SELECT provider_key FROM provider_calls WHERE step = 'receipt'`)
    expect(rows.map((row) => row.provider_key)).toEqual([dead.providerKey])
  })

  it('sends in the order registered, once each, also after fail and completeInTransaction', async () => {
    const { engine } = setup(true)
    const sent: string[] = []
    const failed = owned(await engine.begin({ scope: 'u1', key: 'after-fail', fingerprint }))
    failed.afterCompletion('first', () => void sent.push('fail:first'))
    failed.afterCompletion('second', () => void sent.push('fail:second'))
    await failed.fail(jsonResponse(402, '{}'))
    const inTransaction = owned(await engine.begin({ scope: 'u1', key: 'after-work', fingerprint }))
    inTransaction.afterCompletion('only', () => void sent.push('work:only'))
    expect(await inTransaction.completeInTransaction(async () => ({ response: jsonResponse(201, '{}'), value: 7 }))).toBe(7)
    expect(sent).toEqual(['fail:first', 'fail:second', 'work:only'])
  })

  it('is never sent when the outcome is not recorded: the claim taken over before the completion, or released', async () => {
    const { engine } = setup(true)
    const sent: string[] = []
    const taken = owned(await engine.begin({ scope: 'u1', key: 'after-lost', fingerprint }))
    await taken.step('charge', () => 1)
    taken.afterCompletion('receipt', () => void sent.push('lost'))
    await world.db.pool.query(`UPDATE ${keyTable(world.db)} SET fence_token = gen_random_uuid() WHERE scope = 'u1' AND key = 'after-lost'`)
    const error: unknown = await taken.complete(jsonResponse(201, '{}'), { statements: [insertCharge('ch_after_lost')] }).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_LOCK_LOST')).toBe(true)
    expect(await charges('ch_after_lost')).toBe(0)

    const released = owned(await engine.begin({ scope: 'u1', key: 'after-released', fingerprint }))
    released.afterCompletion('receipt', () => void sent.push('released'))
    await released.release()
    expect({ sent, state: released.state, row: await status('after-released') }).toEqual({ sent: [], state: 'released', row: undefined })
  })

  it('a send that throws goes to onError and changes nothing of the outcome; without onError, a process warning', async () => {
    const { engine } = setup(true)
    const reported: unknown[] = []
    const execution = owned(await engine.begin({ scope: 'u1', key: 'after-throws', fingerprint }))
    execution.afterCompletion('receipt', () => Promise.reject(new Error('mailer down')), { onError: (error) => reported.push(error) })
    execution.afterCompletion('second', () => {
      throw new Error('second down')
    })
    const warnings: Error[] = []
    const onWarning = (warning: Error) => warnings.push(warning)
    process.on('warning', onWarning)
    try {
      await execution.complete(jsonResponse(201, '{}'))
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve))
    } finally {
      process.off('warning', onWarning)
    }
    expect({ state: execution.state, row: await status('after-throws') }).toEqual({ state: 'completed', row: 'completed' })
    expect(reported.map((error) => (error as Error).message)).toEqual(['mailer down'])
    expect(warnings.map((warning) => [(warning as Error & { code?: string }).code, warning.message])).toEqual([
      ['ONCELY_AFTER_COMPLETION_FAILED', 'oncely: the send "second" after the completion of key "after-throws" failed: second down'],
    ])
  })

  it('refuses complete(response, { tx }) once a send is registered, before writing anything: the commit is the caller\'s', async () => {
    const { engine, pool } = setup(true)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'after-tx', fingerprint }))
    execution.afterCompletion('receipt', () => undefined)
    execution.afterCompletion('audit', () => undefined)
    const error: unknown = await withTransaction(pool, (tx) => execution.complete(jsonResponse(201, '{}'), { tx })).catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_INVALID_OPTION')).toBe(true)
    // The transaction is named, never shown.
    expect((error as Error).message).toMatch(/^option tx cannot be given once afterCompletion registered a send \("receipt", "audit"\): .+; got a transaction$/)
    expect({ state: execution.state, row: await status('after-tx') }).toEqual({ state: 'running', row: 'in_progress' })
  })

  it('checks its arguments, and refuses a claim that already ended', async () => {
    const { engine } = setup(true)
    const execution = owned(await engine.begin({ scope: 'u1', key: 'after-args', fingerprint }))
    const code = (work: () => void) => {
      try {
        work()
        return 'none'
      } catch (error) {
        return `${(error as { code?: string }).code}: ${(error as Error).message}`
      }
    }
    const refused = (rule: string) => `ONCELY_INVALID_OPTION: option ${rule}`
    expect(code(() => execution.afterCompletion('', () => undefined))).toBe(refused('name must be a non-empty string; got ""'))
    expect(code(() => execution.afterCompletion(7 as unknown as string, () => undefined))).toBe(refused('name must be a non-empty string; got 7'))
    expect(code(() => execution.afterCompletion('x', 'send' as unknown as () => void))).toBe(refused('run must be a function; got "send"'))
    expect(code(() => execution.afterCompletion('x', () => undefined, null as unknown as object))).toBe(refused('options must be an object; got null'))
    expect(code(() => execution.afterCompletion('x', () => undefined, 'quiet' as unknown as object))).toBe(refused('options must be an object; got "quiet"'))
    expect(code(() => execution.afterCompletion('x', () => undefined, { onError: 1 as unknown as () => void }))).toBe(refused('onError must be a function; got 1'))
    await execution.complete(jsonResponse(201, '{}'))
    expect(code(() => execution.afterCompletion('late', () => undefined))).toMatch(/^ONCELY_CLAIM_FINISHED: /)
  })
})
