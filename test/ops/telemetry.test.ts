import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ENGINE_EVENTS, engineChannelName, fingerprintRequest, instrumentEngine, type EngineEvent, type SpanLike, type TracerLike } from '../../src/index.js'
import { releaseKey } from '../../src/ops/release-key.js'
import { reconcileStuckClaims } from '../../src/ops/reconciler.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim, engineOn, jsonResponse } from '../helpers/engine.js'
import { deadClaim } from './support/dead-claim.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

/** Records what the engine publishes on every oncely channel while `work` runs. */
async function recordEvents(work: () => Promise<void>): Promise<EngineEvent[]> {
  const events: EngineEvent[] = []
  const listener = (message: unknown) => events.push(message as EngineEvent)
  for (const event of ENGINE_EVENTS) subscribe(engineChannelName(event), listener)
  try {
    await work()
  } finally {
    for (const event of ENGINE_EVENTS) unsubscribe(engineChannelName(event), listener)
  }
  return events
}

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

describe('instrumentEngine and the diagnostics channels', () => {
  it('publishes claimed, completed, replayed, conflict, mismatch and taken-over, and ends one span per request with its outcome', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const { tracer, spans } = recordingTracer()
    const traced = instrumentEngine(engine, { tracer })
    const events = await recordEvents(async () => {
      await traced.run({ scope: 't', key: 'a', fingerprint }, async (execution) => {
        await execution.step('charge', () => ({ id: 'ch' }))
        return jsonResponse(201, '{}')
      })
      await traced.begin({ scope: 't', key: 'a', fingerprint })
      await traced.begin({ scope: 't', key: 'a', fingerprint: other })
      const held = await traced.begin({ scope: 't', key: 'b', fingerprint })
      await traced.begin({ scope: 't', key: 'b', fingerprint })
      if (held.kind === 'execute') await held.execution.suspend()
      const resumed = await traced.begin({ scope: 't', key: 'b', fingerprint })
      if (resumed.kind === 'execute') await resumed.execution.complete(jsonResponse(201, '{}'))
    })
    expect(events.map((e) => e.event)).toEqual(['claimed', 'completed', 'replayed', 'mismatch', 'claimed', 'conflict', 'suspended', 'taken-over', 'completed'])
    expect(events[1]).toMatchObject({ scope: 't', key: 'a', recoveryPoint: 'charge' })
    expect(spans.every((span) => span.ended && span.name === 'oncely.request')).toBe(true)
    expect(spans.map((span) => span.attributes['idempotency.outcome'])).toEqual(['created', 'replayed', 'mismatch', 'suspended', 'conflict', 'created'])
    expect(spans[0]?.attributes['idempotency.recovery_point']).toBe('charge')
    expect(spans[5]?.attributes['idempotency.claim']).toBe('take-over')
  })

  it('publishes lock-lost when a taken-over worker writes, and reconciled and released from the operations tools', async () => {
    const { engine } = engineOn(db, { staleAfterMs: 60_000 })
    const { tracer, spans } = recordingTracer()
    const traced = instrumentEngine(engine, { tracer })
    const events = await recordEvents(async () => {
      const first = await traced.begin({ scope: 'u', key: 'lost', fingerprint })
      await ageClaim(db, 'u', 'lost')
      const second = await traced.begin({ scope: 'u', key: 'lost', fingerprint })
      if (first.kind === 'execute') await expect(first.execution.complete(jsonResponse(201, '{}'))).rejects.toThrow(/taken over/)
      if (second.kind === 'execute') await second.execution.complete(jsonResponse(201, '{}'))
      await deadClaim(db, { scope: 'u', key: 'stuck', fingerprint })
      await reconcileStuckClaims({ engine, database: { pool: db.pool, schema: db.schema }, hook: async () => {}, olderThanMs: 60_000, log: () => {} })
      await releaseKey({ pool: db.pool, schema: db.schema }, { scope: 'u', key: 'stuck', force: true, staleAfterMs: 60_000, log: () => {} })
    })
    expect(events.map((e) => e.event)).toEqual(['claimed', 'taken-over', 'lock-lost', 'completed', 'reconciled', 'released'])
    expect(events[4]).toMatchObject({ key: 'stuck', decision: 'unresolved' })
    expect(spans[0]?.status?.code).toBe(2)
  })
})
