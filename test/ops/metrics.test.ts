import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { createMetrics } from '../../src/ops/metrics.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, keyTable } from '../helpers/engine.js'
import { deadClaim } from './support/dead-claim.js'

const run = promisify(execFile)
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

function captureLog() {
  const lines: Array<{ level: string; fields: Record<string, unknown>; message: string }> = []
  const at = (level: string) => (fields: Record<string, unknown>, message: string) => lines.push({ level, fields, message })
  return { lines, log: { info: at('info'), warn: at('warn'), error: at('error') } }
}

async function sample(metrics: ReturnType<typeof createMetrics>, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  const metric = (await metrics.registry.getMetricsAsJSON()).find((m) => m.name === name)
  const value = metric?.values.find((v) => Object.entries(labels).every(([k, l]) => (v.labels as Record<string, unknown>)[k] === l))
  return value?.value
}

describe('oncely/metrics', () => {
  it("no entry loads prom-client on import, 'oncely/metrics' included; createMetrics does (issue 24)", { timeout: 60_000 }, async () => {
    // A module-load hook prints every file loaded from node_modules by import, and the CommonJS
    // cache is printed after the run (createMetrics loads prom-client with require), in a real
    // Node process.
    const hook = `import { register } from 'node:module'; register('data:text/javascript,' + encodeURIComponent("export async function load(u, c, n) { if (u.includes('/node_modules/')) console.log('LOADED ' + u); return n(u, c) }"))`
    const loads = async (entry: string, then = '') => {
      const file = fileURLToPath(new URL(`../../src/${entry}`, import.meta.url))
      const script = `const loaded = await import(${JSON.stringify(file)}); ${then}; const { createRequire } = await import('node:module'); for (const name of Object.keys(createRequire(import.meta.url).cache)) console.log('REQUIRED ' + name)`
      const { stdout } = await run(process.execPath, ['--import', 'tsx', '--import', `data:text/javascript,${encodeURIComponent(hook)}`, '--input-type=module', '-e', script])
      return stdout
    }
    for (const entry of ['index.ts', 'store/postgres/index.ts', 'adapters/express.ts', 'adapters/hono.ts', 'outbox/index.ts', 'ops/index.ts', 'ops/metrics.ts']) {
      expect(await loads(entry), entry).not.toContain('/prom-client/')
    }
    expect(await loads('ops/metrics.ts', 'loaded.createMetrics()')).toContain('/prom-client/')
  })

  it('counts a payload repeated under a new key by the same user, with one sampled log line naming the route', async () => {
    const { lines, log } = captureLog()
    const metrics = createMetrics({ log, routes: ['POST /v1/orders'] })
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/orders', body: { sku: 'a' } })
    const other = fingerprintRequest({ method: 'POST', route: '/v1/orders', body: { sku: 'b' } })
    const event = (scope: string, key: string, fp: string) => ({ outcome: 'created' as const, status: 201, durationMs: 5, route: 'POST /v1/orders', scope, key, fingerprint: fp })
    metrics.onOutcome(event('1', 'k1', fingerprint))
    metrics.onOutcome(event('1', 'k1', fingerprint)) // a retry with the same key: what should happen
    metrics.onOutcome(event('2', 'k9', fingerprint)) // another user
    metrics.onOutcome(event('1', 'k2', other)) // another payload
    expect(await sample(metrics, 'oncely_repeated_payload_new_key_total', { route: 'POST /v1/orders' })).toBe(0)
    metrics.onOutcome(event('1', 'k3', fingerprint)) // the same payload, a new key: a key minted per attempt
    metrics.observePayload({ scope: '1', key: 'k4', fingerprint, route: 'POST /v1/orders' })
    expect(await sample(metrics, 'oncely_repeated_payload_new_key_total', { route: 'POST /v1/orders' })).toBe(2)
    const warned = lines.filter((line) => line.message.includes('new Idempotency-Key'))
    expect(warned).toHaveLength(1)
    expect(warned[0]?.fields).toMatchObject({ route: 'POST /v1/orders', scope: '1' })
    expect(warned[0]?.fields.key).toMatch(/^[0-9a-f]{16}$/)
    expect(await sample(metrics, 'oncely_route_requests_total', { route: 'POST /v1/orders', outcome: 'created' })).toBe(5)
  })

  it('forgets payloads beyond its memory bound (what it misses is documented)', async () => {
    const metrics = createMetrics({ log: captureLog().log, repeatedPayloads: { maxEntries: 2 } })
    const fp = (n: number) => fingerprintRequest({ method: 'POST', route: '/x', body: n })
    metrics.observePayload({ scope: '1', key: 'a', fingerprint: fp(1) })
    metrics.observePayload({ scope: '1', key: 'b', fingerprint: fp(2) })
    metrics.observePayload({ scope: '1', key: 'c', fingerprint: fp(3) })
    metrics.observePayload({ scope: '1', key: 'd', fingerprint: fp(1) })
    expect(await sample(metrics, 'oncely_repeated_payload_new_key_total', { route: '' })).toBeUndefined()
    metrics.observePayload({ scope: '1', key: 'e', fingerprint: fp(3) })
    expect(await sample(metrics, 'oncely_repeated_payload_new_key_total', { route: '' })).toBe(1)
  })

  it('warns once, and says so in a gauge, when the p99 of created requests reaches half the stale threshold', async () => {
    const { lines, log } = captureLog()
    const metrics = createMetrics({ log, staleAfterMs: 1000 })
    for (let i = 0; i < 100; i++) metrics.onOutcome({ outcome: 'created', status: 201, durationMs: 100 })
    expect(await sample(metrics, 'oncely_stale_threshold_too_close')).toBe(0)
    for (let i = 0; i < 100; i++) metrics.onOutcome({ outcome: 'created', status: 201, durationMs: 600 })
    expect(await sample(metrics, 'oncely_stale_threshold_too_close')).toBe(1)
    expect(await sample(metrics, 'oncely_created_duration_p99_seconds')).toBeCloseTo(0.6)
    for (let i = 0; i < 100; i++) metrics.onOutcome({ outcome: 'created', status: 201, durationMs: 700 })
    expect(lines.filter((line) => line.level === 'warn' && line.message.includes('half the stale threshold'))).toHaveLength(1)
    // Replays are fast by nature and say nothing about the handler.
    expect(lines[0]?.fields).toMatchObject({ staleAfterMs: 1000 })
  })

  it('counts running claims by lease age and by age since creation, so a hung handler that renews shows', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/r', body: null })
    const hung = await engine.begin({ scope: 'm', key: 'hung', fingerprint })
    await db.pool.query(`UPDATE ${keyTable(db)} SET created_at = now() - interval '2 hours' WHERE scope = 'm' AND key = 'hung'`)
    await deadClaim(db, { scope: 'm', key: 'dead', fingerprint, suspend: true })
    const metrics = createMetrics({ database: { pool: db.pool, schema: db.schema }, staleAfterMs: 60_000, log: captureLog().log })
    expect(await sample(metrics, 'oncely_running_claims', { state: 'held' })).toBe(1)
    expect(await sample(metrics, 'oncely_running_claims', { state: 'suspended' })).toBe(1)
    expect(await sample(metrics, 'oncely_running_claims_past_stale', { since: 'lease' })).toBe(1)
    // The hung one, whose lease is fresh: invisible by lease age.
    expect(await sample(metrics, 'oncely_running_claims_past_stale', { since: 'creation' })).toBe(1)
    expect(await sample(metrics, 'oncely_stale_in_progress_keys')).toBe(1)
    expect(await sample(metrics, 'oncely_running_claim_oldest_age_seconds', { since: 'creation' })).toBeGreaterThanOrEqual(7200)
    if (hung.kind === 'execute') await hung.execution.release()
  })

  it('reports the reconciler decisions and the outbox backlog', async () => {
    const metrics = createMetrics({ outbox: { backlog: async () => ({ waiting: 3, oldestAgeMs: 4500 }) } })
    metrics.onReconcile({ decision: 'completed' })
    expect(await sample(metrics, 'oncely_reconciled_total', { decision: 'completed' })).toBe(1)
    expect(await sample(metrics, 'oncely_reconciled_total', { decision: 'unresolved' })).toBe(0)
    expect(await sample(metrics, 'oncely_outbox_waiting_events')).toBe(3)
    expect(await sample(metrics, 'oncely_outbox_oldest_event_age_seconds')).toBe(4.5)
  })
})
