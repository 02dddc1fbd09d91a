import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, storeClaim } from '../helpers/engine.js'

let db: TestDatabase
let env: Record<string, string>
beforeAll(async () => {
  db = await createTestDatabase()
  env = { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema, IDEMPOTENCY_STALE_AFTER_MS: '60000' }
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: {} })

describe('oncely keys and oncely stats', () => {
  it('list --stuck, show, release (refused, then --force with the provider keys and an audit line), stats', async () => {
    const { store, engine } = engineOn(db)
    const claimed = await storeClaim(store, { scope: '7', key: 'stuck-1', fingerprint })
    if (claimed.kind !== 'claimed') throw new Error('no claim')
    await store.commitPhase({ scope: '7', key: 'stuck-1', fenceToken: claimed.claim.fenceToken }, 'charge', { id: 'ch_x' })
    await ageClaim(db, '7', 'stuck-1')
    await engine.run({ scope: '7', key: 'done-1', fingerprint }, async () => jsonResponse(201, '{"id":"ch_ok"}'))

    const list = await runCli(['keys', 'list', '--stuck', '--json'], env)
    expect(list.code).toBe(0)
    expect((JSON.parse(list.stdout) as Array<{ key: string; state: string }>).map((k) => [k.key, k.state])).toEqual([['stuck-1', 'stuck']])
    const text = await runCli(['keys', 'list', '--user', '7'], env)
    expect(text.stdout).toMatch(/^stuck .*key="stuck-1".* after charge$/m)
    expect(text.stdout).toMatch(/^completed .*key="done-1".* 201$/m)

    const show = await runCli(['keys', 'show', '7', 'done-1'], env)
    expect(show.code).toBe(0)
    expect(show.stdout).toContain('{"id":"ch_ok"}')
    expect((await runCli(['keys', 'show', '8', 'done-1'], env)).code).toBe(1)

    const refused = await runCli(['keys', 'release', '7', 'stuck-1'], env)
    expect(refused.code).toBe(1)
    expect(refused.stdout).toMatch(/^not released: step results are recorded \(charge\)/)
    const forced = await runCli(['keys', 'release', '7', 'stuck-1', '--force'], env)
    expect(forced.code).toBe(0)
    expect(forced.stdout).toMatch(/^released: the next request with this key runs as a new operation/)
    expect(forced.stdout).toMatch(/step charge: provider key [0-9a-f]{64}/)
    expect(forced.stderr).toMatch(/^warn: idempotency key released audit=release actor=\S+ scope=7 key=[0-9a-f]{16} /m)

    const stats = await runCli(['stats', '--json'], env)
    expect(stats.code).toBe(0)
    expect(JSON.parse(stats.stdout)).toMatchObject({ counts: { completed: 1, stuck: 0 } })
    expect((await runCli(['keys', 'frobnicate'], env)).code).toBe(2)
  })
})
