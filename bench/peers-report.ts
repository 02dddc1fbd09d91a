import type { LoadRun } from './http-load.js'
import { figure, type Figure } from './report.js'
import { median } from './stats.js'

/** The runs of one cell (`service replay`…) of the peers' bench. */
export interface PeerCell {
  target: string
  cell: string
  runs: LoadRun[]
}

/** The target of `--against DIR`: the reference service of another build. */
export const AGAINST = 'service (against)'
/** With a Redis: the other build's reference service with its Redis cache. */
export const AGAINST_REDIS = 'service + redis (against)'

/** The Redis-backed replay the replay targets compare with: a Redis library's, on Express 5. */
const REDIS_REPLAY = 'redis peer replay'

/**
 * Every cell beside plain Express's fresh charges (req/s and CPU), and issue 21's targets, each
 * against the figure it names. Reported, never failed on.
 */
export function peerFigures(cells: readonly PeerCell[], connections: number): { cells: Figure[]; targets: Figure[] } {
  const of = (name: string) => cells.find((c) => `${c.target} ${c.cell}` === name)?.runs ?? []
  // A run in which nothing completed has no per-request figures (NaN): median() leaves it out.
  const med = (runs: readonly LoadRun[], pick: (run: LoadRun) => number) => median(runs.map(pick))
  const express = of('express fresh')
  const expressRate = med(express, (r) => r.perSecond)
  const expressCpu = med(express, (r) => r.cpuMsPerRequest)
  const section = `peers, ${connections} connections, closed loop`
  const all = cells.map((c) =>
    figure(
      {
        section,
        name: `${c.target} ${c.cell}`,
        unit: 'req/s',
        runs: c.runs.map((r) => r.perSecond),
        baseline: { name: 'express fresh', value: expressRate },
        extra: {
          'API CPU-ms/req': med(c.runs, (r) => r.cpuMsPerRequest),
          'CPU × express': med(c.runs, (r) => r.cpuMsPerRequest) / expressCpu,
          'main thread CPU-ms/req': med(c.runs, (r) => r.mainThreadCpuMsPerRequest),
          'API writes/req': med(c.runs, (r) => r.writesPerRequest),
          'PostgreSQL CPU-ms/req': med(c.runs, (r) => r.databaseCpuMsPerRequest),
          'p50 ms': med(c.runs, (r) => r.p50),
          'p99 ms': med(c.runs, (r) => r.p99),
          requests: String(c.runs.reduce((sum, r) => sum + r.requests, 0)),
        },
      },
      med(c.runs, (r) => r.perSecond),
    ),
  )
  const rate = (name: string) => med(of(name), (r) => r.perSecond)
  const targets: Figure[] = []
  const versus = (name: string, baseline: string, ratio: number, label: string) => {
    if (of(name).length === 0 || of(baseline).length === 0) return
    targets.push(figure({ section: 'issue 21 targets', name: `${name} ÷ ${baseline}`, unit: 'req/s', runs: of(name).map((r) => r.perSecond), baseline: { name: baseline, value: rate(baseline) }, target: { compare: '>=', ratio, label } }, rate(name)))
  }
  versus('service fresh', 'express fresh', 0.4, '')
  const serviceFresh = of('service fresh')
  if (serviceFresh.length > 0) {
    // An absolute budget, as the issue states it: the ratio is to 1 ms.
    targets.push(
      figure(
        { section: 'issue 21 targets', name: 'service fresh: API CPU-ms/request', unit: 'ms', runs: serviceFresh.map((r) => r.cpuMsPerRequest), baseline: { name: 'per request', value: 1 }, target: { compare: '<=', ratio: 0.5, label: '(≤ 0.5 ms)' } },
        med(serviceFresh, (r) => r.cpuMsPerRequest),
      ),
    )
  }
  versus('service replay', REDIS_REPLAY, 1.0, '')
  versus('service + redis replay', REDIS_REPLAY, 1.5, '')
  versus('minimal + oncely fresh', 'minimal fresh', 0.5, '')
  // Not targets: how far the service is from the same durable work written lean on this machine,
  // and how far that floor itself is from plain Express (what a target against Express can reach here).
  const against = (name: string, baseline: string) => {
    if (of(name).length === 0 || of(baseline).length === 0) return
    targets.push(figure({ section: 'issue 21 targets', name: `${name} ÷ ${baseline}`, unit: 'req/s', runs: of(name).map((r) => r.perSecond), baseline: { name: baseline, value: rate(baseline) } }, rate(name)))
  }
  against('lean durable fresh', 'express fresh')
  against('service fresh', 'lean durable fresh')
  against('service replay', 'lean durable replay')
  // With `--against DIR`: this build's service beside the other build's, cell by cell, and so
  // with the Redis cache when a Redis answers.
  for (const cell of ['fresh', 'replay', 'conflict', 'mismatch']) {
    against(`service ${cell}`, `${AGAINST} ${cell}`)
    against(`service + redis ${cell}`, `${AGAINST_REDIS} ${cell}`)
  }
  return { cells: all, targets }
}
