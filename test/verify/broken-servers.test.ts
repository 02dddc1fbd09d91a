import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { formatTable, runConformance, type ConformanceReport } from '../../src/verify/index.js'
import { startProbeServer, type ProbeServer } from './support/probe-server.js'
import { startKeyedServer, startRunsEveryRequest, type KeyedFlaws, type ToyServer } from './support/toy-servers.js'

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

  it('passes an endpoint that keeps keys per credential, refuses a changed payload and keeps no 5xx', async () => {
    const report = await verify(() => startKeyedServer(probe), true)
    expect(report.failed, formatTable(report)).toBe(0)
    expect(report.results.filter((result) => result.outcome === 'skip').map((result) => result.id)).toEqual(['ttl'])
  })

  // Each flaw on its own, and the checks that must catch it: no more, no fewer.
  const REPLAYS = ['replay', 'concurrent-pair', 'concurrent-burst', 'payload-mismatch', 'reordered-json', 'credentials-isolated']
  const FLAWS: Array<[string, KeyedFlaws, string[], RegExp]> = [
    ['replays whatever the payload', { payload: 'ignored' }, ['payload-mismatch'], /^the changed payload answered 201 replayed, \d+ bytes, not 422$/],
    ['fingerprints the bytes, not the meaning', { payload: 'bytes' }, ['reordered-json'], /^the reordered request has no Idempotent-Replayed: true; .*status 422/],
    ['keeps keys for everyone, not per credential', { perCredential: false }, ['credentials-isolated'], /^the second credential's answer is 201 replayed, \d+ bytes: it was given the first credential's stored response/],
    ['keeps and replays a 5xx', { keepsServerErrors: true }, ['server-error-not-stored'], /^the retry is marked Idempotent-Replayed: the 5xx was stored$/],
    ['answers 409 without Retry-After', { retryAfter: null }, ['retry-after'], /^concurrent-pair: no Retry-After; concurrent-burst: no Retry-After$/],
    ['answers 409 with a Retry-After of a day', { retryAfter: '86400' }, ['retry-after'], /^concurrent-pair: Retry-After 86400 s is over an hour; /],
    ['replays without Idempotent-Replayed', { marksReplays: false }, [...REPLAYS, 'cut-after-first-byte'], /^the repeat has no Idempotent-Replayed: true$/],
    ['replays a body written again', { reserializes: true }, REPLAYS, /^the repeat's body differs from the first answer's \(\d+ bytes against \d+, first different byte at offset 1\)$/],
  ]
  for (const [flaw, flaws, failing, reason] of FLAWS) {
    it(`fails ${failing.join(', ')} for an endpoint that ${flaw}`, async () => {
      const report = await verify(() => startKeyedServer(probe, flaws), true)
      const failed = report.results.filter((result) => result.outcome === 'fail')
      expect(failed.map((result) => result.id), formatTable(report)).toEqual(failing)
      expect(failed[0]?.reason).toMatch(reason)
    })
  }
})
