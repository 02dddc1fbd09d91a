import { interleaved } from './closed-loop.js'
import { backendsCpu, BODY, createHolds, deleteRedisEntries, expectStatus, HOLD_MS, loadRun, type LoadRun } from './http-load.js'
import { startCli, type BenchProcess } from './processes.js'
import { figure, type Figure } from './report.js'
import { median } from './stats.js'

// A schema of the run's own: the Redis entries of a run are its own too, and deleted at its end.
const SCHEMA = `bench_http_${process.pid}`

type Kind = 'fresh' | 'replay' | 'conflict'

interface Variant {
  /** `none fresh`, `oncely replay`, `oncely + redis conflict`… */
  name: string
  service: BenchProcess
  kind: Kind
}

type Run = LoadRun

export interface HttpOptions {
  seconds: number
  rounds: number
  connections: number
  /** Also measure a service started with this `REDIS_URL`. */
  redisUrl: string | undefined
  /** Extra node flags for the oncely service (e.g. `--cpu-prof`). */
  nodeOptions: string[]
}

/**
 * HTTP level (issue 11, benchmark 2): the reference service answering fresh charges, replays and
 * 409s, against the same service with `IDEMPOTENCY_STRATEGY=none` doing the same business work.
 * Closed-loop autocannon runs, interleaved, then a fixed-rate run for the tail latency that a
 * closed loop hides. CPU per request is the API process's own, from /proc.
 */
export async function httpBench(databaseUrl: string, options: HttpOptions): Promise<Figure[]> {
  const started: BenchProcess[] = []
  const start = async (promise: Promise<BenchProcess>) => {
    const process = await promise
    started.push(process)
    return process
  }
  try {
    const provider = await start(startCli(['provider', '--port', '0', '--latency-ms', '0']))
    const holdingProvider = await start(startCli(['provider', '--port', '0', '--latency-ms', String(HOLD_MS)]))
    const serve = (strategy: string, providerUrl: string, env: Record<string, string> = {}, nodeOptions: string[] = []) =>
      start(startCli(['serve', '--port', '0', '--database-url', databaseUrl, '--schema', SCHEMA, '--provider-url', providerUrl, '--strategy', strategy], env, nodeOptions))
    const none = await serve('none', provider.url)
    const oncely = await serve('atomic-phases', provider.url, {}, options.nodeOptions)
    // Holds one claim in flight for the whole run: its provider never answers (and the service
    // waits for it as long), so every other request with that key is a 409.
    const holder = await serve('atomic-phases', holdingProvider.url, { PROVIDER_LATENCY_MS: String(HOLD_MS) })
    const redis = options.redisUrl ? await serve('atomic-phases', provider.url, { REDIS_URL: options.redisUrl }) : undefined

    const holds = createHolds(databaseUrl)
    const hold = (target: BenchProcess) => holds.hold(`${holder.url}/v1/charges`, SCHEMA, `${target.url}/v1/charges`)
    await expectStatus(`${oncely.url}/v1/charges`, 'bench-replay', 201)

    const variants: Variant[] = [
      { name: 'none fresh', service: none, kind: 'fresh' },
      { name: 'oncely fresh', service: oncely, kind: 'fresh' },
      { name: 'oncely replay', service: oncely, kind: 'replay' },
      { name: 'oncely conflict', service: oncely, kind: 'conflict' },
    ]
    if (redis) {
      variants.push({ name: 'oncely + redis fresh', service: redis, kind: 'fresh' }, { name: 'oncely + redis replay', service: redis, kind: 'replay' }, { name: 'oncely + redis conflict', service: redis, kind: 'conflict' })
    }
    const prepare = async (variant: Variant) => (variant.kind === 'conflict' ? hold(variant.service) : variant.kind === 'replay' ? 'bench-replay' : undefined)
    const databaseCpu = backendsCpu(databaseUrl)
    const load = (variant: Variant, key: string | undefined, run: { seconds: number; connections: number; rate?: number }) =>
      loadRun({ url: `${variant.service.url}/v1/charges`, process: variant.service, name: variant.name }, { key, body: BODY, expected: EXPECTED[variant.kind] }, { ...run, databaseCpu })
    for (const variant of variants) await load(variant, await prepare(variant), { seconds: 2, connections: options.connections })

    const closed = new Map<string, Run[]>(variants.map((v) => [v.name, []]))
    await interleaved(options.rounds, variants, async (variant) => {
      closed.get(variant.name)?.push(await load(variant, await prepare(variant), { seconds: options.seconds, connections: options.connections }))
    })
    // The fixed rate is one every variant sustains: half of what oncely's fresh charges reach.
    const rate = Math.max(10, Math.round(median(runsOf(closed, 'oncely fresh').map((r) => r.perSecond)) / 2))
    const fixed = new Map<string, Run[]>(variants.map((v) => [v.name, []]))
    await interleaved(Math.max(1, Math.ceil(options.rounds / 2)), variants, async (variant) => {
      fixed.get(variant.name)?.push(await load(variant, await prepare(variant), { seconds: options.seconds, connections: options.connections, rate }))
    })
    await holds.release()
    await databaseCpu.close()
    return report(variants, closed, fixed, rate, options.connections)
  } finally {
    for (const process of started.reverse()) await process.stop()
    if (options.redisUrl) await deleteRedisEntries(options.redisUrl, `oncely:${SCHEMA}:*`)
  }
}

const EXPECTED: Record<Kind, number> = { fresh: 201, replay: 201, conflict: 409 }

function runsOf(runs: Map<string, Run[]>, name: string): Run[] {
  return runs.get(name) ?? []
}

function report(variants: readonly Variant[], closed: Map<string, Run[]>, fixed: Map<string, Run[]>, rate: number, connections: number): Figure[] {
  const base = runsOf(closed, 'none fresh')
  const baseFixed = runsOf(fixed, 'none fresh')
  const targets: Record<string, number> = { 'oncely fresh': 0.5, 'oncely replay': 1.0, 'oncely + redis replay': 1.5, 'oncely + redis fresh': 0.5 }
  const figures: Figure[] = []
  const section = `HTTP, ${connections} connections, closed loop`
  for (const v of variants.filter((v) => v.name !== 'none fresh')) {
    const runs = runsOf(closed, v.name)
    const target = targets[v.name]
    figures.push(
      figure(
        {
          section,
          name: `${v.name}: req/s`,
          unit: 'req/s',
          runs: runs.map((r) => r.perSecond),
          baseline: { name: 'none', value: median(base.map((r) => r.perSecond)) },
          ...(target === undefined ? {} : { target: { compare: '>=' as const, ratio: target, label: v.name === 'oncely fresh' ? '(goal 0.8×)' : '' } }),
          extra: { 'p50 ms': median(runs.map((r) => r.p50)), 'p99 ms': median(runs.map((r) => r.p99)), 'none p99 ms': median(base.map((r) => r.p99)) },
        },
        median(runs.map((r) => r.perSecond)),
      ),
    )
  }
  for (const v of variants.filter((v) => v.name !== 'none fresh')) {
    const runs = runsOf(closed, v.name)
    figures.push(
      figure(
        {
          section: `${section}: CPU of the API process per request`,
          name: `${v.name}: CPU-ms/request`,
          unit: 'ms',
          runs: runs.map((r) => r.cpuMsPerRequest),
          baseline: { name: 'none', value: median(base.map((r) => r.cpuMsPerRequest)) },
          extra: { 'PostgreSQL CPU-ms/request': median(runs.map((r) => r.databaseCpuMsPerRequest)), 'none: PostgreSQL CPU-ms/request': median(base.map((r) => r.databaseCpuMsPerRequest)) },
        },
        median(runs.map((r) => r.cpuMsPerRequest)),
      ),
    )
  }
  for (const v of variants.filter((v) => v.name !== 'none fresh')) {
    const runs = runsOf(fixed, v.name)
    figures.push(
      figure(
        {
          section: `HTTP, fixed rate ${rate} req/s: p99 latency`,
          name: `${v.name}: p99`,
          unit: 'ms',
          runs: runs.map((r) => r.p99),
          baseline: { name: 'none', value: median(baseFixed.map((r) => r.p99)) },
          extra: { 'p50 ms': median(runs.map((r) => r.p50)), 'none p50 ms': median(baseFixed.map((r) => r.p50)) },
        },
        median(runs.map((r) => r.p99)),
      ),
    )
  }
  return figures
}
