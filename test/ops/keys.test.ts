import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { deriveStepKey, fingerprintRequest } from '../../src/index.js'
import { inspectKey, listKeys } from '../../src/ops/keys.js'
import { keyStats } from '../../src/ops/key-stats.js'
import { releaseKey } from '../../src/ops/release-key.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'
import { deadClaim as makeDeadClaim } from './support/dead-claim.js'

let db: TestDatabase
let target: { pool: TestDatabase['pool']; schema: string }
beforeAll(async () => {
  db = await createTestDatabase()
  target = { pool: db.pool, schema: db.schema }
})
afterAll(async () => {
  await db.close()
})

const STALE = 60_000
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })
let nextScope = 1
const newScope = () => `keys-${nextScope++}`

const deadClaim = (scope: string, key: string, options: { step?: string; suspend?: boolean } = {}) => makeDeadClaim(db, { scope, key, fingerprint, ...options })

function captureLog() {
  const lines: Array<{ fields: Record<string, unknown>; message: string }> = []
  const push = (fields: Record<string, unknown>, message: string) => lines.push({ fields, message })
  return { lines, log: { info: push, warn: push, error: push } }
}

describe('listKeys and inspectKey', () => {
  it('tell running, stuck, suspended and completed keys apart, stuck ones first, per user when asked', async () => {
    const scope = newScope()
    const { engine } = engineOn(db, { staleAfterMs: STALE })
    const running = await engine.begin({ scope, key: 'running', fingerprint })
    await deadClaim(scope, 'stuck')
    await deadClaim(scope, 'suspended', { step: 'charge', suspend: true })
    await engine.run({ scope, key: 'done', fingerprint }, async () => jsonResponse(201, '{"id":"ch_9"}'))
    await deadClaim(newScope(), 'other-user')

    const all = await listKeys(target, { scope, staleAfterMs: STALE })
    expect(Object.fromEntries(all.map((k) => [k.key, k.state]))).toEqual({ running: 'running', stuck: 'stuck', suspended: 'suspended', done: 'completed' })
    const stuck = await listKeys(target, { scope, stuck: true, staleAfterMs: STALE })
    expect(stuck.map((k) => k.key).sort()).toEqual(['stuck', 'suspended'])
    expect(stuck.every((k) => (k.leaseAgeMs ?? 0) >= 3_000_000)).toBe(true)

    const details = await inspectKey(target, { scope, key: 'suspended', staleAfterMs: STALE })
    expect(details).toMatchObject({ state: 'suspended', fingerprint, recoveryPoint: 'charge', response: null })
    expect(details?.steps).toEqual([
      { name: 'charge', result: { id: 'ch_step' }, providerKey: deriveStepKey({ scope, key: 'suspended', claimId: details?.claimId ?? '', step: 'charge' }) },
    ])
    const done = await inspectKey(target, { scope, key: 'done' })
    expect(done?.response).toEqual({ status: 201, headers: [['content-type', 'application/json']], body: '{"id":"ch_9"}', bodyEncoding: 'utf8' })
    expect(await inspectKey(target, { scope: newScope(), key: 'done' })).toBeUndefined()
    if (running.kind === 'execute') await running.execution.release()
  })
})

describe('releaseKey', () => {
  it('refuses a claim a live worker holds, even with force', async () => {
    const scope = newScope()
    const { engine } = engineOn(db, { staleAfterMs: STALE })
    const decision = await engine.begin({ scope, key: 'live', fingerprint })
    const result = await releaseKey(target, { scope, key: 'live', force: true, staleAfterMs: STALE, log: captureLog().log })
    expect(result).toMatchObject({ released: false, reason: 'held' })
    if (decision.kind === 'execute') await decision.execution.complete(jsonResponse(201, '{}'))
    expect((await inspectKey(target, { scope, key: 'live' }))?.state).toBe('completed')
  })

  it.each([
    ['a dead owner that recorded nothing', {}],
    ['a recorded step', { step: 'charge' }],
    ['a suspension', { suspend: true }],
  ])('refuses a claim that may have acted (%s) unless forced, then deletes it with one audit line', async (_name, options) => {
    const scope = newScope()
    const claim = await deadClaim(scope, 'k', options)
    const { lines, log } = captureLog()
    const refused = await releaseKey(target, { scope, key: 'k', staleAfterMs: STALE, log })
    expect(refused).toMatchObject({ released: false, reason: 'may-have-acted' })
    expect(lines).toEqual([])
    expect(await inspectKey(target, { scope, key: 'k' })).toBeDefined()

    const forced = await releaseKey(target, { scope, key: 'k', force: true, staleAfterMs: STALE, actor: 'alice', log })
    expect(forced).toMatchObject({ released: true, forced: true })
    expect(await inspectKey(target, { scope, key: 'k' })).toBeUndefined()
    expect(lines).toHaveLength(1)
    expect(lines[0]?.fields).toMatchObject({ audit: 'release', actor: 'alice', scope, claimId: claim.claimId })
    expect(JSON.stringify(lines[0])).not.toContain('"k"')
    // The next request with the key is a new operation: a new claim, so new provider keys.
    const { engine } = engineOn(db, { staleAfterMs: STALE })
    const again = await engine.begin({ scope, key: 'k', fingerprint })
    expect(again.kind === 'execute' && again.execution.claimId !== claim.claimId).toBe(true)
    if (again.kind === 'execute') await again.execution.release()
  })

  it('a completed key needs force: releasing it forgets an outcome retries would replay', async () => {
    const scope = newScope()
    const { engine } = engineOn(db)
    await engine.run({ scope, key: 'paid', fingerprint }, async () => jsonResponse(201, '{}'))
    expect(await releaseKey(target, { scope, key: 'paid', log: captureLog().log })).toMatchObject({ released: false, reason: 'may-have-acted' })
    expect(await releaseKey(target, { scope, key: 'paid', force: true, log: captureLog().log })).toMatchObject({ released: true })
  })

  it('deletes nothing when the claim changed after it was read (a retry took it over)', async () => {
    const scope = newScope()
    await deadClaim(scope, 'raced')
    const { engine } = engineOn(db, { staleAfterMs: STALE })
    const { pool } = db
    // The take-over lands between the release's read and its delete: hold the delete's query.
    let takeover: Promise<unknown> | undefined
    const racing = {
      connect: () => pool.connect(),
      query: async (config: { text: string; values?: unknown[] }) => {
        if (config.text.includes('DELETE FROM') && takeover === undefined) {
          takeover = engine.begin({ scope, key: 'raced', fingerprint })
          const decision = (await takeover) as Awaited<ReturnType<typeof engine.begin>>
          expect(decision.kind).toBe('execute')
        }
        return pool.query(config)
      },
    }
    const result = await releaseKey({ pool: racing as never, schema: db.schema }, { scope, key: 'raced', force: true, staleAfterMs: STALE, log: captureLog().log })
    expect(result).toMatchObject({ released: false, reason: 'changed' })
    expect((await inspectKey(target, { scope, key: 'raced', staleAfterMs: STALE }))?.state).toBe('running')
    const decision = (await takeover) as Awaited<ReturnType<typeof engine.begin>>
    if (decision.kind === 'execute') await decision.execution.release()
  })

  it('evicts the key from a cache after a release', async () => {
    const scope = newScope()
    await deadClaim(scope, 'cached')
    const evicted: string[] = []
    await releaseKey(target, { scope, key: 'cached', force: true, staleAfterMs: STALE, log: captureLog().log, cache: { evict: async (s, k) => void evicted.push(`${s}/${k}`) } })
    expect(evicted).toEqual([`${scope}/cached`])
  })
})

describe('keyStats', () => {
  it('counts by state, the oldest running claim, the table size and what the sweeper has not deleted yet', async () => {
    const before = await keyStats(target, { staleAfterMs: STALE })
    const scope = newScope()
    await deadClaim(scope, 'a')
    const { engine } = engineOn(db)
    await engine.run({ scope, key: 'b', fingerprint }, async () => jsonResponse(201, '{}'))
    await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '10 minutes' WHERE scope = $1 AND key = 'b'`, [scope])
    const stats = await keyStats(target, { staleAfterMs: STALE })
    expect(stats.counts.stuck - before.counts.stuck).toBe(1)
    expect(stats.counts.completed - before.counts.completed).toBe(1)
    expect(stats.sweeper.expiredUnswept - before.sweeper.expiredUnswept).toBe(1)
    expect(stats.sweeper.lagMs).toBeGreaterThanOrEqual(600_000)
    expect(stats.oldestRunning?.leaseAgeMs).toBeGreaterThanOrEqual(3_600_000)
    expect(stats.tableBytes).toBeGreaterThan(0)
  })
})
