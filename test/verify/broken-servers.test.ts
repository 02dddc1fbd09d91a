import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { formatTable, runConformance, type ConformanceReport } from '../../src/verify/index.js'
import { startProbeServer, type ProbeServer } from './support/probe-server.js'
import { startKeyedServer, startRunsEveryRequest, type ToyServer } from './support/toy-servers.js'

let probe: ProbeServer

beforeAll(async () => {
  probe = await startProbeServer()
})

afterAll(async () => {
  await probe?.close()
})

async function verify(start: () => Promise<ToyServer>, perKey = false): Promise<ConformanceReport> {
  const server = await start()
  try {
    return await runConformance({
      url: server.url,
      body: '{"amount":1000,"currency":"usd"}',
      headers: { authorization: 'Bearer a' },
      otherHeaders: { authorization: 'Bearer b' },
      probe: perKey ? probe.perKeyUrl : probe.totalUrl,
      failBody: '{"fail":true}',
    })
  } finally {
    await server.close()
  }
}

const outcomes = (report: ConformanceReport) => Object.fromEntries(report.results.map((result) => [result.id, result.outcome]))
const reasonOf = (report: ConformanceReport, id: string) => report.results.find((result) => result.id === id)?.reason ?? ''

describe('oncely verify catches broken endpoints', () => {
  it('fails an endpoint that runs every request on the duplicate, replay and cut checks', async () => {
    const report = await verify(() => startRunsEveryRequest(probe))
    expect(report.ok).toBe(false)
    const seen = outcomes(report)
    for (const id of ['replay', 'concurrent-pair', 'concurrent-burst', 'payload-mismatch', 'reordered-json', 'missing-key', 'malformed-key', 'duplicate-key', 'credentials-isolated', 'cut-before-response', 'cut-after-first-byte']) {
      expect([id, seen[id]], formatTable(report)).toEqual([id, 'fail'])
    }
    expect(reasonOf(report, 'replay')).toMatch(/no Idempotent-Replayed: true.*the probe counted 2 executions, not 1/)
    expect(reasonOf(report, 'concurrent-burst')).toMatch(/^50 answers were not a 409 nor marked Idempotent-Replayed/)
    expect(reasonOf(report, 'concurrent-pair')).toMatch(/^2 answers were not a 409/)
    expect(reasonOf(report, 'cut-before-response')).toMatch(/the probe counted 2 executions, not 1/)
    // It never answers a 5xx to the failing body, and never a 409: nothing to judge there.
    expect(reasonOf(report, 'server-error-not-stored')).toMatch(/answered 201, not a 5xx/)
    expect([seen['retry-after'], seen.ttl]).toEqual(['skip', 'skip'])
  })

  it('fails only payload-mismatch for an endpoint that keeps keys but replays whatever the payload', async () => {
    const report = await verify(() => startKeyedServer(probe, { checksPayload: false }), true)
    const seen = outcomes(report)
    expect(Object.entries(seen).filter(([, outcome]) => outcome === 'fail').map(([id]) => id), formatTable(report)).toEqual(['payload-mismatch'])
    expect(reasonOf(report, 'payload-mismatch')).toMatch(/^the changed payload answered 201 replayed, \d+ bytes, not 422$/)
    expect(seen.replay).toBe('pass')
  })

  it('passes the same endpoint once it refuses a changed payload with 422', async () => {
    const report = await verify(() => startKeyedServer(probe, { checksPayload: true }), true)
    expect(report.failed, formatTable(report)).toBe(0)
    expect(report.skipped).toBe(1)
  })
})
