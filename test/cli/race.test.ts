import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { beforeAll, describe, expect, inject, it } from 'vitest'
import type { RaceReport } from '../../src/cli/race/report.js'
import { formatTable } from '../../src/cli/race/report.js'
import { matchesExpected, type RaceRow } from '../../src/cli/race/run-scenario.js'
import { SCENARIOS } from '../../src/cli/race/scenarios.js'
import { runCli, type CliResult } from '../helpers/cli.js'

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url))

/** `oncely race …` from source, with a longer leash than `runCli` gives (the run takes ~15 s). */
function runRace(args: string[], env: Record<string, string>): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', MAIN, 'race', ...args], { env: { ...process.env, ...env }, timeout: 110_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr })
    })
  })
}

/**
 * Issue 4: `oncely race --json` as a real process, on the suite's server (`adminUrl`: the
 * embedded PostgreSQL 18, or DATABASE_URL in CI's second run), asserting the article's rows.
 */
describe('oncely race', () => {
  let result: CliResult
  let report: RaceReport
  beforeAll(async () => {
    result = await runRace(['--json'], { DATABASE_URL: inject('adminUrl') })
    report = JSON.parse(result.stdout) as RaceReport
  }, 120_000)

  const row = (strategy: string, scenario: string): RaceRow => {
    const found = report.rows.find((r) => r.strategy === strategy && r.scenario === scenario)
    if (!found) throw new Error(`no row ${strategy}/${scenario} in:\n${result.stdout}\n${result.stderr}`)
    return found
  }

  it('runs on the server the environment names, prints its version, and exits 0', () => {
    expect(result.code, result.stderr).toBe(0)
    expect(report.postgres).toEqual({ version: inject('serverVersion'), source: 'DATABASE_URL' })
    expect(report.rows.map((r) => [r.strategy, r.scenario])).toEqual([
      ['select-for-update', 'concurrent'],
      ['atomic-phases', 'concurrent'],
      ['claim-in-transaction', 'crash'],
      ['atomic-phases', 'crash'],
    ])
    expect(report.rows.every((r) => r.matches)).toBe(true)
    expect(report.matches).toBe(true)
  })

  it('select-for-update: two concurrent requests give 201 and 500, one charge', () => {
    expect(row('select-for-update', 'concurrent')).toMatchObject({ statuses: [201, 500], charges: 1 })
  })

  it('atomic-phases: two concurrent requests give 201 and 409, one charge', () => {
    expect(row('atomic-phases', 'concurrent')).toMatchObject({ statuses: [201, 409], charges: 1 })
  })

  it('claim-in-transaction: a crash after the provider, then a retry, charges twice', () => {
    const measured = row('claim-in-transaction', 'crash')
    // The claim rolled back with the crash: the retry finds no record and runs again at once.
    expect(measured).toMatchObject({ statuses: [null, 201], charges: 2 })
  })

  it('atomic-phases: the same crash, then retries, charges once', () => {
    const measured = row('atomic-phases', 'crash')
    const [crashed, ...retries] = measured.statuses
    expect(crashed).toBeNull()
    // 409 while the dead claim is fresh, then exactly one retry takes it over and finishes.
    expect(retries.at(-1)).toBe(201)
    expect(retries.slice(0, -1).every((status) => status === 409)).toBe(true)
    expect(measured.charges).toBe(1)
  })
})

describe('oncely race, the verdict', () => {
  const crashRow = SCENARIOS[3]!
  const concurrentRow = SCENARIOS[1]!

  it('a row differs when a count or a status is not the article one', () => {
    expect(matchesExpected(concurrentRow, [201, 409], 1)).toBe(true)
    expect(matchesExpected(concurrentRow, [201, 201], 1)).toBe(false)
    expect(matchesExpected(concurrentRow, [201, 409], 2)).toBe(false)
    expect(matchesExpected(crashRow, [null, 409, 409, 201], 1)).toBe(true)
    expect(matchesExpected(crashRow, [null, 201], 2)).toBe(false)
    // The crash did not happen: the first request was answered.
    expect(matchesExpected(crashRow, [201, 201], 1)).toBe(false)
    expect(matchesExpected(crashRow, [null, 500, 201], 1)).toBe(false)
  })

  it('the table prints what was measured and names a differing row', () => {
    const rows: RaceRow[] = [
      { strategy: 'atomic-phases', scenario: 'concurrent', description: concurrentRow.description, statuses: [201, 201], charges: 2, expected: concurrentRow.expected, matches: false, durationMs: 1 },
      { strategy: 'atomic-phases', scenario: 'crash', description: crashRow.description, statuses: [null, 409, 409, 201], charges: 1, expected: crashRow.expected, matches: true, durationMs: 1 },
    ]
    const table = formatTable({ postgres: { version: '99.1', source: 'embedded' }, providerLatencyMs: 500, staleAfterMs: 1500, rows, matches: false, durationMs: 1000 })
    expect(table).toContain('PostgreSQL 99.1 (embedded)')
    expect(table).toContain('| 201 and 201 ')
    expect(table).toContain('differs (article: 201 and 409, 1 charge)')
    expect(table).toContain('crashed, then 409 ×2, 201')
    expect(table).toContain('1 of 2 rows differ from the article')
  })

  it('--help exits 0; a stray argument exits 2', async () => {
    const helped = await runCli(['race', '--help'])
    expect(helped.code).toBe(0)
    expect(helped.stdout).toContain('usage: oncely race')
    const stray = await runCli(['race', 'extra'], { DATABASE_URL: '' })
    expect(stray.code).toBe(2)
    expect(stray.stderr).toContain('unexpected argument')
  })
})
