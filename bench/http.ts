import autocannon from 'autocannon'
import pg from 'pg'
import { interleaved } from './closed-loop.js'
import { processCpuMs, startCli, type BenchProcess } from './processes.js'
import { figure, type Figure } from './report.js'
import { median } from './stats.js'

const USER = 'Bearer demo_7'
const BODY = '{"amount":1000,"currency":"usd","customer":"cus_bench"}'
const HOLD_MS = 3_600_000
// A schema of the run's own: the Redis entries of a run are its own too, and deleted at its end.
const SCHEMA = `bench_http_${process.pid}`

type Kind = 'fresh' | 'replay' | 'conflict'

interface Variant {
  /** `none fresh`, `oncely replay`, `oncely + redis conflict`… */
  name: string
  service: BenchProcess
  kind: Kind
}

interface Run {
  perSecond: number
  p50: number
  p99: number
  cpuMsPerRequest: number
  /** CPU of the PostgreSQL backends serving the bench's database, per request. */
  databaseCpuMsPerRequest: number
}

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

    const held = new AbortController()
    const holding: Array<Promise<unknown>> = []
    // A new held key before every conflict run: a request held longer than the HTTP client's
    // own timeouts would end, and its claim would be suspended and taken over.
    let holds = 0
    const hold = async (target: BenchProcess) => {
      const key = `bench-conflict-${holds++}`
      holding.push(fetch(`${holder.url}/v1/charges`, { method: 'POST', headers: headers(key), body: BODY, signal: held.signal }).catch(() => undefined))
      // Only once the holder's claim is committed may anyone else send the key, or they would claim it.
      await waitForClaim(databaseUrl, key)
      await waitForStatus(target.url, key, 409)
      return key
    }
    await expectStatus(oncely.url, 'bench-replay', 201)

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
    for (const variant of variants) await load(variant, await prepare(variant), { seconds: 2, connections: options.connections })

    databaseCpu = backendsCpu(databaseUrl)
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
    held.abort()
    await Promise.all(holding)
    await databaseCpu.close()
    return report(variants, closed, fixed, rate, options.connections)
  } finally {
    for (const process of started.reverse()) await process.stop()
    if (options.redisUrl) await deleteEntries(options.redisUrl)
  }
}

/** The run's cache entries (namespace = its schema): the shared Redis keeps nothing of a bench. */
async function deleteEntries(redisUrl: string): Promise<void> {
  const { Redis } = await import('ioredis')
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 })
  try {
    let cursor = '0'
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `oncely:${SCHEMA}:*`, 'COUNT', 1000)
      cursor = next
      if (keys.length > 0) await redis.del(...keys)
    } while (cursor !== '0')
  } finally {
    redis.disconnect()
  }
}

function headers(key: string): Record<string, string> {
  return { authorization: USER, 'content-type': 'application/json', 'idempotency-key': key }
}

const EXPECTED: Record<Kind, number> = { fresh: 201, replay: 201, conflict: 409 }
let sequence = 0
let databaseCpu: { sample(): Promise<Map<number, number>>; close(): Promise<void> } = { sample: async () => new Map(), close: async () => {} }

/**
 * The CPU time of each PostgreSQL backend connected to the bench's database, read from /proc:
 * what a request costs the database. Backends come and go with the pools, so a run's cost is
 * the sum over the backends alive at its end of what each used since its start (or since it
 * opened).
 */
function backendsCpu(databaseUrl: string): { sample(): Promise<Map<number, number>>; close(): Promise<void> } {
  const client = new pg.Client({ connectionString: databaseUrl })
  // Open across the whole run: a connection the server ends (57P01) must fail the next sample
  // with its error, not crash the process with an unhandled 'error' event.
  client.on('error', (error) => process.stderr.write(`bench: the CPU sampler's connection ended: ${error.message}\n`))
  const connected = client.connect()
  return {
    async sample() {
      await connected
      const { rows } = await client.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()')
      const sample = new Map<number, number>()
      for (const { pid } of rows) {
        const ms = await processCpuMs(pid).catch(() => undefined)
        if (ms !== undefined) sample.set(pid, ms)
      }
      return sample
    },
    close: () => client.end(),
  }
}

function usedSince(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0
  for (const [pid, ms] of after) total += ms - (before.get(pid) ?? 0)
  return total
}

/** One autocannon run on `variant`: every request with `key`, or each with a new key when there is none. */
async function load(variant: Variant, key: string | undefined, options: { seconds: number; connections: number; rate?: number }): Promise<Run> {
  const prefix = `fresh-${process.pid}-${sequence++}-`
  let n = 0
  const cpuBefore = await variant.service.cpuMs()
  const databaseBefore = await databaseCpu.sample()
  const result = await autocannon({
    url: `${variant.service.url}/v1/charges`,
    connections: options.connections,
    duration: options.seconds,
    ...(options.rate === undefined ? {} : { overallRate: options.rate }),
    requests: [
      {
        method: 'POST',
        body: BODY,
        headers: headers(key ?? ''),
        ...(key === undefined ? { setupRequest: (request) => ({ ...request, headers: headers(`${prefix}${n++}`) }) } : {}),
      },
    ],
  })
  const cpuMs = (await variant.service.cpuMs()) - cpuBefore
  const databaseMs = usedSince(databaseBefore, await databaseCpu.sample())
  const statuses = Object.keys(result.statusCodeStats)
  if (result.errors > 0 || statuses.some((s) => Number(s) !== EXPECTED[variant.kind])) {
    throw new Error(`${variant.name}: expected only ${EXPECTED[variant.kind]}, got ${JSON.stringify(result.statusCodeStats)} and ${result.errors} errors`)
  }
  return { perSecond: result.requests.total / result.duration, p50: result.latency.p50, p99: result.latency.p99, cpuMsPerRequest: cpuMs / Math.max(1, result.requests.total), databaseCpuMsPerRequest: databaseMs / Math.max(1, result.requests.total) }
}

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

async function expectStatus(url: string, key: string, status: number): Promise<void> {
  const response = await fetch(`${url}/v1/charges`, { method: 'POST', headers: headers(key), body: BODY })
  await response.arrayBuffer()
  if (response.status !== status) throw new Error(`setting up ${key}: expected ${status}, got ${response.status}`)
}

async function waitForStatus(url: string, key: string, status: number): Promise<void> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const response = await fetch(`${url}/v1/charges`, { method: 'POST', headers: headers(key), body: BODY })
    await response.arrayBuffer()
    if (response.status === status) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`${key} never answered ${status}`)
}

async function waitForClaim(databaseUrl: string, key: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    for (let attempt = 0; attempt < 200; attempt++) {
      const { rowCount } = await client.query(`SELECT 1 FROM ${SCHEMA}.idempotency_key WHERE key = $1 AND status = 'in_progress'`, [key])
      if (rowCount === 1) return
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
    throw new Error(`the holding service never claimed ${key}`)
  } finally {
    await client.end()
  }
}
