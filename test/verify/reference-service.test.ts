import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CHECK_IDS } from '../../src/verify/index.js'
import type { ConformanceReport } from '../../src/verify/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { providerCharges, startProvider, startService, type TestProcess } from '../helpers/processes.js'

let db: TestDatabase
let provider: TestProcess
let service: TestProcess
let dir: string

beforeAll(async () => {
  db = await createTestDatabase()
  // A provider call that takes a moment, so duplicates overlap the one that runs and see its 409.
  provider = await startProvider({ latencyMs: 200 })
  service = await startService({ databaseUrl: db.url, schema: db.schema, providerUrl: provider.url })
  dir = await mkdtemp(path.join(tmpdir(), 'oncely-verify-'))
})

afterAll(async () => {
  await service?.stop()
  await provider?.stop()
  await db?.close()
  if (dir !== undefined) await rm(dir, { recursive: true, force: true })
})

describe('oncely verify against the reference service', () => {
  it('passes every check it is given the means for, from a template file, and writes JSON and JUnit XML', { timeout: 90_000 }, async () => {
    const template = path.join(dir, 'template.json')
    await writeFile(
      template,
      JSON.stringify({
        body: { amount: 1000, currency: 'usd', customer: 'cus_verify' },
        headers: { authorization: 'Bearer demo_41' },
        otherHeaders: { authorization: 'Bearer demo_42' },
        // The provider's list of charges: one per execution that charged.
        probe: `${provider.url}/v1/charges`,
        // The fake provider fails a cus_flaky customer's first call per key with 503, before charging.
        failBody: { amount: 1000, currency: 'usd', customer: 'cus_flaky_verify' },
      }),
    )
    const junit = path.join(dir, 'report.xml')
    const chargesBefore = (await providerCharges(provider.url)).length
    const result = await runCli(['verify', `${service.url}/v1/charges`, '--template', template, '--json', '--junit', junit])
    const report = JSON.parse(result.stdout) as ConformanceReport
    const outcomes = Object.fromEntries(report.results.map((check) => [check.id, check.outcome]))
    expect(outcomes, result.stdout).toEqual(Object.fromEntries(CHECK_IDS.map((id) => [id, id === 'ttl' ? 'skip' : 'pass'])))
    expect(result.code).toBe(0)
    // The kit's own executions, each once: replay, pair, burst, mismatch, reordered, two
    // credentials, two cuts and the 5xx retry; nothing for the refused requests.
    expect((await providerCharges(provider.url)).length - chargesBefore).toBe(10)
    const xml = await readFile(junit, 'utf8')
    expect(xml).toContain(`<testsuite name="oncely verify ${service.url}/v1/charges" tests="${CHECK_IDS.length}" failures="0" errors="0" skipped="1"`)
    expect(xml.match(/<testcase /g)).toHaveLength(CHECK_IDS.length)
    expect(xml).toMatch(/<testcase classname="oncely.verify" name="ttl: [^"]+" time="[\d.]+">\s*<skipped message="needs the endpoint&apos;s TTL/)
    expect(result.stdout + result.stderr).not.toContain('demo_41')
  })
})
