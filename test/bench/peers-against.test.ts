import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect, it } from 'vitest'
import type { LoadRun } from '../../bench/http-load.js'
import { AGAINST, AGAINST_REDIS, peerFigures, type PeerCell } from '../../bench/peers-report.js'

// `npm run bench -- --only peers --against DIR` (issue 21): another build's reference service
// measured in the same interleaved run as this one's, so a change's before and after are two
// figures of one run, not of two runs on a machine whose load moved in between.

const run = (perSecond: number): LoadRun => ({ perSecond, requests: perSecond, cpuMsPerRequest: 1, mainThreadCpuMsPerRequest: 1, writesPerRequest: 1, databaseCpuMsPerRequest: 1, p50: 1, p99: 1 })

it('reports each cell of this build’s service against the same cell of the other build, as a comparison and not as a target', () => {
  const cells: PeerCell[] = [
    { target: 'express', cell: 'fresh', runs: [run(1000)] },
    ...['fresh', 'replay', 'conflict', 'mismatch'].flatMap((cell, i) => [
      { target: 'service', cell, runs: [run(100 * (i + 2))] },
      { target: AGAINST, cell, runs: [run(100 * (i + 1))] },
    ]),
  ]
  const { targets } = peerFigures(cells, 32)
  for (const [cell, ratio] of [['fresh', 2], ['replay', 1.5], ['conflict', 4 / 3], ['mismatch', 1.25]] as const) {
    const beside = targets.find((f) => f.name === `service ${cell} ÷ ${AGAINST} ${cell}`)
    expect(beside?.ratio, cell).toBeCloseTo(ratio, 10)
    expect(beside?.target, cell).toBeUndefined()
  }
  // Without --against there is nothing to compare with, and no such row.
  const alone = peerFigures(cells.filter((c) => c.target !== AGAINST), 32).targets
  expect(alone.some((f) => f.name.includes(AGAINST))).toBe(false)
})

it('with a Redis, reports this build’s service with its cache against the other build’s with its cache, cell by cell', () => {
  const cells: PeerCell[] = ['fresh', 'replay', 'conflict', 'mismatch'].flatMap((cell, i) => [
    { target: 'service', cell, runs: [run(100)] },
    { target: AGAINST, cell, runs: [run(100)] },
    { target: 'service + redis', cell, runs: [run(300 * (i + 1))] },
    { target: AGAINST_REDIS, cell, runs: [run(200 * (i + 1))] },
  ])
  const { targets } = peerFigures(cells, 32)
  for (const cell of ['fresh', 'replay', 'conflict', 'mismatch']) {
    const beside = targets.find((f) => f.name === `service + redis ${cell} ÷ ${AGAINST_REDIS} ${cell}`)
    expect(beside?.ratio, cell).toBeCloseTo(1.5, 10)
    expect(beside?.target, cell).toBeUndefined()
  }
  // No Redis: no cached cells of either build, and no such row.
  const withoutRedis = peerFigures(cells.filter((c) => !c.target.includes('redis')), 32).targets
  expect(withoutRedis.some((f) => f.name.includes(AGAINST_REDIS))).toBe(false)
})

it('refuses a folder without a build before it starts anything, saying how to make one', () => {
  const root = fileURLToPath(new URL('../..', import.meta.url))
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--only', 'peers', '--against', '/nonexistent-oncely-build'], { cwd: root, encoding: 'utf8', timeout: 60_000 })
  expect(result.status).not.toBe(0)
  expect(result.stderr).toContain('--against /nonexistent-oncely-build: no /nonexistent-oncely-build/dist/cli/main.js')
  expect(result.stderr).toContain('git worktree add')
  // Refused before any database was opened: the machine line is printed only once one is.
  expect(result.stdout).not.toContain('oncely bench:')
})
