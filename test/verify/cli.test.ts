import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine } from '../../src/engine/engine.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { runConformance } from '../../src/verify/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startProbeServer, type ProbeServer } from './support/probe-server.js'
import { startTarget } from './support/targets.js'
import { startRunsEveryRequest } from './support/toy-servers.js'

let probe: ProbeServer
let db: TestDatabase

beforeAll(async () => {
  probe = await startProbeServer()
  db = await createTestDatabase()
})

afterAll(async () => {
  await probe?.close()
  await db?.close()
})

describe('oncely verify: exit codes, the table, the TTL', () => {
  it('exits 1 with the table and each failure\'s details when a check fails, never printing a header value', { timeout: 60_000 }, async () => {
    const server = await startRunsEveryRequest(probe)
    try {
      const result = await runCli(['verify', server.url, '--data', '{"amount":1}', '--header', 'authorization: Bearer sk_secret_9', '--only', 'replay,missing-key,ttl'])
      expect(result.code, result.stderr).toBe(1)
      expect(result.stdout).toMatch(/^ {2}FAIL {4}replay {7}a repeat is replayed byte for byte, marked Idempotent-Replayed: the repeat has no Idempotent-Replayed: true/m)
      expect(result.stdout).toMatch(/^ {2}SKIP {4}ttl/m)
      expect(result.stdout).toMatch(/^ {2}sent: {5}POST \/v1\/charges: the template again, Idempotency-Key: "oncely-verify-[0-9a-f-]{36}"$/m)
      expect(result.stdout).toMatch(/^0 passed, 2 failed, 1 skipped in [\d.]+ s$/m)
      expect(result.stdout + result.stderr).not.toContain('sk_secret_9')
    } finally {
      await server.close()
    }
  })

  it('is listed by oncely help, prints its --help, and exits 2 on bad usage, naming what is wrong', { timeout: 60_000 }, async () => {
    const [help, ownHelp, noUrl, badOnly, badHeader] = await Promise.all([
      runCli(['help']),
      runCli(['verify', '--help']),
      runCli(['verify']),
      runCli(['verify', 'http://127.0.0.1:1/x', '--only', 'replay,nonsense']),
      runCli(['verify', 'http://127.0.0.1:1/x', '--header', 'Bearer sk_secret_9']),
    ])
    expect(help.stdout).toMatch(/^ {2}verify +run the conformance checks against an Idempotency-Key endpoint$/m)
    expect([ownHelp.code, ownHelp.stdout]).toEqual([0, expect.stringMatching(/^usage: oncely verify URL \[flags\][\s\S]*never\nproduction[\s\S]*exit codes:\n {2}0 {2}every check passed/)])
    expect([noUrl.code, noUrl.stderr]).toEqual([2, "oncely verify: URL is required (or url in --template)\nsee 'oncely verify --help'\n"])
    expect([badOnly.code, badOnly.stderr]).toEqual([2, expect.stringMatching(/option only must list check ids \(replay, .*\); got "nonsense"/)])
    expect([badHeader.code, badHeader.stderr]).toEqual([2, expect.stringContaining("--header number 1 must look like 'NAME: VALUE'")])
    expect(badHeader.stderr).not.toContain('sk_secret_9')
  })

  it('passes ttl against an engine whose keys live a short while, and fails it against one whose keys live a day', { timeout: 60_000 }, async () => {
    const engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 1000, ttlMs: 1500 })
    const target = await startTarget('node:http', engine, probe)
    try {
      const report = await runConformance({ url: target.url, body: '{"amount":1}', headers: { authorization: 'Bearer demo_5' }, probe: probe.perKeyUrl, ttlMs: 1500, only: ['ttl'] })
      expect(report.results.map((result) => [result.id, result.outcome, result.reason])).toEqual([['ttl', 'pass', '']])
      expect(report.results[0]?.seen).toMatch(/^first 201, \d+ bytes; after the TTL 201, \d+ bytes; 1 execution counted by the probe$/)
    } finally {
      await target.close()
    }
    // The same check against keys that live a day: the repeat after 1.5 s is still the replay.
    const longLived = await startTarget('node:http', createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }) }), probe)
    try {
      const report = await runConformance({ url: longLived.url, body: '{"amount":1}', headers: { authorization: 'Bearer demo_5' }, ttlMs: 1500, only: ['ttl'] })
      expect(report.results.map((result) => [result.id, result.outcome, result.reason])).toEqual([['ttl', 'fail', 'the request after the TTL is a replay: the key was not forgotten']])
    } finally {
      await longLived.close()
    }
  })
})
