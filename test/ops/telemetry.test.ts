import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest, type Engine } from '../../src/index.js'
import { instrumentEngine, sweepExpiredKeys, type SpanLike, type TracerLike } from '../../src/ops/index.js'
import { releaseKey } from '../../src/ops/release-key.js'
import { reconcileStuckClaims } from '../../src/ops/reconciler.js'
import type { Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse, keyTable, recordEvents } from '../helpers/engine.js'
import { deadClaim } from './support/dead-claim.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

/** A tracer that keeps its spans, standing in for an OpenTelemetry SDK (only the API is installed). */
function recordingTracer() {
  const spans: Array<{ name: string; attributes: Record<string, unknown>; status?: { code: number }; ended: boolean }> = []
  const tracer: TracerLike = {
    startSpan(name, options) {
      const span: (typeof spans)[number] = { name, attributes: { ...options?.attributes }, ended: false }
      spans.push(span)
      const handle: SpanLike = {
        setAttribute: (key, value) => (span.attributes[key] = value),
        setStatus: (status) => (span.status = status),
        end: () => (span.ended = true),
      }
      return handle
    },
  }
  return { tracer, spans }
}

const fingerprint = fingerprintRequest({ method: 'POST', route: '/t', body: { n: 1 } })
const other = fingerprintRequest({ method: 'POST', route: '/t', body: { n: 2 } })

/** One request of every kind the engine answers, under `scope`. */
async function everyAnswer(engine: Engine<Queryable>, scope: string): Promise<void> {
  await engine.run({ scope, key: 'a', fingerprint }, async (execution) => {
    await execution.step('charge', () => ({ id: 'ch' }))
    return jsonResponse(201, '{}')
  })
  await engine.begin({ scope, key: 'a', fingerprint })
  await engine.begin({ scope, key: 'a', fingerprint: other })
  const held = await engine.begin({ scope, key: 'b', fingerprint })
  await engine.begin({ scope, key: 'b', fingerprint })
  if (held.kind === 'execute') await held.execution.suspend()
  const resumed = await engine.begin({ scope, key: 'b', fingerprint })
  if (resumed.kind === 'execute') await resumed.execution.complete(jsonResponse(201, '{}'))
  await engine.begin({ scope, key: '', fingerprint })
  const untouched = await engine.begin({ scope, key: 'c', fingerprint })
  if (untouched.kind === 'execute') await untouched.execution.release()
}

const EVERY_ANSWER = ['claimed', 'completed', 'replayed', 'mismatch', 'claimed', 'conflict', 'suspended', 'taken-over', 'completed', 'invalid', 'claimed', 'released']

describe('the engine publishes its events on node:diagnostics_channel by itself', () => {
  it('claimed, completed, replayed, mismatch, conflict, suspended, taken-over, invalid, released: each once, with scope, key, claim and recovery point', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const events = await recordEvents(() => everyAnswer(engine, 'plain'))
    expect(events.map((e) => e.event)).toEqual(EVERY_ANSWER)
    const [claimed, completed] = events
    expect(claimed).toMatchObject({ scope: 'plain', key: 'a', how: 'new', recoveryPoint: null })
    expect(completed).toMatchObject({ scope: 'plain', key: 'a', claimId: claimed?.claimId, recoveryPoint: 'charge' })
    expect(events[2]).toEqual({ event: 'replayed', scope: 'plain', key: 'a' })
    expect(events[7]).toMatchObject({ key: 'b', how: 'take-over', claimId: events[4]?.claimId })
    expect(events[9]).toEqual({ event: 'invalid', scope: 'plain', key: '' })
  })

  it('lock-lost (with its code) when a taken-over worker writes; reconciled, released and swept from the operations tools', async () => {
    const { engine, store } = engineOn(db, { staleAfterMs: 60_000 })
    const events = await recordEvents(async () => {
      const first = await engine.begin({ scope: 'u', key: 'lost', fingerprint })
      await ageClaim(db, 'u', 'lost')
      const second = await engine.begin({ scope: 'u', key: 'lost', fingerprint })
      if (first.kind === 'execute') await expect(first.execution.complete(jsonResponse(201, '{}'))).rejects.toThrow(/taken over/)
      if (second.kind === 'execute') await second.execution.complete(jsonResponse(201, '{}'))
      await deadClaim(db, { scope: 'u', key: 'stuck', fingerprint })
      await reconcileStuckClaims({ engine, database: { pool: db.pool, schema: db.schema }, hook: async () => {}, olderThanMs: 60_000, log: () => {} })
      await releaseKey({ pool: db.pool, schema: db.schema }, { scope: 'u', key: 'stuck', force: true, staleAfterMs: 60_000, log: () => {} })
      await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 second' WHERE scope = 'u' AND key = 'lost'`)
      await sweepExpiredKeys(store, { batchSize: 10 })
    })
    expect(events.map((e) => e.event)).toEqual(['claimed', 'taken-over', 'lock-lost', 'completed', 'reconciled', 'released', 'swept'])
    expect(events[2]).toMatchObject({ scope: 'u', key: 'lost', code: 'ONCELY_LOCK_LOST' })
    expect(events[4]).toMatchObject({ key: 'stuck', decision: 'unresolved' })
    expect(events[5]).toMatchObject({ key: 'stuck', by: 'operator' })
    expect(events[6]).toEqual({ event: 'swept', deleted: 1, batches: 1 })
  })
})

describe('instrumentEngine', () => {
  it('ends one span per request with its outcome, and the events stay one per outcome (never published twice)', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const { tracer, spans } = recordingTracer()
    const events = await recordEvents(() => everyAnswer(instrumentEngine(engine, { tracer }), 'traced'))
    expect(events.map((e) => e.event)).toEqual(EVERY_ANSWER)
    expect(spans.every((span) => span.ended && span.name === 'oncely.request')).toBe(true)
    expect(spans.map((span) => span.attributes['idempotency.outcome'])).toEqual(['created', 'replayed', 'mismatch', 'suspended', 'conflict', 'created', 'invalid', 'released'])
    expect(spans[0]?.attributes['idempotency.recovery_point']).toBe('charge')
    expect(spans[5]?.attributes['idempotency.claim']).toBe('take-over')
  })

  it('marks the span of a worker whose claim was taken over as an error', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const { tracer, spans } = recordingTracer()
    const traced = instrumentEngine(engine, { tracer })
    const first = await traced.begin({ scope: 'v', key: 'lost', fingerprint })
    await ageClaim(db, 'v', 'lost')
    const second = await traced.begin({ scope: 'v', key: 'lost', fingerprint })
    if (first.kind === 'execute') await expect(first.execution.complete(jsonResponse(201, '{}'))).rejects.toThrow(/taken over/)
    if (second.kind === 'execute') await second.execution.complete(jsonResponse(201, '{}'))
    expect(spans.map((span) => [span.attributes['idempotency.outcome'], span.status?.code])).toEqual([
      ['lock-lost', 2],
      ['created', undefined],
    ])
  })

  it('without a tracer is the engine itself', () => {
    const { engine } = engineOn(db)
    expect(instrumentEngine(engine)).toBe(engine)
  })
})
