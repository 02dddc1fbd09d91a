import autocannon from 'autocannon'
import pg from 'pg'
import { processCpuMs, type BenchProcess } from './processes.js'

/** What every HTTP part of the bench sends: the demo's user 7 and one charge body. */
export const USER = 'Bearer demo_7'
export const BODY = '{"amount":1000,"currency":"usd","customer":"cus_bench"}'
/** The same charge for another amount: with a key first used with `BODY`, a 422. */
export const OTHER_BODY = '{"amount":2000,"currency":"usd","customer":"cus_bench"}'
/** How long a held request's provider takes to answer: longer than any run. */
export const HOLD_MS = 3_600_000

/**
 * `BODY` for each of `customers` customers (`cus_bench_0`…): fresh charges spread over them
 * instead of all for one, whose events take turns on one ordering lock (docs/outbox.md, Order).
 */
export function spreadBodies(customers: number): string[] {
  return Array.from({ length: customers }, (_, i) => JSON.stringify({ ...(JSON.parse(BODY) as object), customer: `cus_bench_${i}` }))
}

export function headers(key: string): Record<string, string> {
  return { authorization: USER, 'content-type': 'application/json', 'idempotency-key': key }
}

/** CPU time of PostgreSQL's backends, sampled around a run. */
export interface DatabaseCpu {
  sample(): Promise<Map<number, number>>
  close(): Promise<void>
}

/**
 * The CPU time of each PostgreSQL backend connected to the bench's database, read from /proc:
 * what a request costs the database. Backends come and go with the pools, so a run's cost is
 * the sum over the backends alive at its end of what each used since its start (or since it
 * opened).
 */
export function backendsCpu(databaseUrl: string): DatabaseCpu {
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

export function usedSince(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0
  for (const [pid, ms] of after) total += ms - (before.get(pid) ?? 0)
  return total
}

/** One closed-loop (or fixed-rate) run's figures; CPU and writes are per request completed. */
export interface LoadRun {
  perSecond: number
  p50: number
  p99: number
  requests: number
  cpuMsPerRequest: number
  /** Of `cpuMsPerRequest`, the main thread's: the rest is V8's helper threads (garbage collection). */
  mainThreadCpuMsPerRequest: number
  writesPerRequest: number
  databaseCpuMsPerRequest: number
}

let sequence = 0

/**
 * One autocannon run on `url`: every request with `key`, or each with a new key when there is
 * none, each then with the next of `bodies` (round robin) when given. Throws unless every answer
 * is `expected`: a figure of the wrong answers is no figure.
 */
export async function loadRun(
  target: { url: string; process: BenchProcess; name: string },
  request: { key: string | undefined; body: string; expected: number; bodies?: readonly string[] },
  options: { seconds: number; connections: number; rate?: number; databaseCpu: DatabaseCpu },
): Promise<LoadRun> {
  const prefix = `fresh-${process.pid}-${sequence++}-`
  let n = 0
  const { key, bodies } = request
  const fresh = <R extends object>(r: R) => {
    const i = n++
    return { ...r, headers: headers(`${prefix}${i}`), ...(bodies === undefined ? {} : { body: bodies[i % bodies.length] }) }
  }
  const [cpuBefore, mainBefore, writesBefore, databaseBefore] = [await target.process.cpuMs(), await target.process.mainThreadCpuMs(), await target.process.writes(), await options.databaseCpu.sample()]
  const result = await autocannon({
    url: target.url,
    connections: options.connections,
    duration: options.seconds,
    ...(options.rate === undefined ? {} : { overallRate: options.rate }),
    requests: [
      {
        method: 'POST',
        body: request.body,
        headers: headers(key ?? ''),
        ...(key === undefined ? { setupRequest: (r) => fresh(r) } : {}),
      },
    ],
  })
  const cpuMs = (await target.process.cpuMs()) - cpuBefore
  const mainThreadMs = (await target.process.mainThreadCpuMs()) - mainBefore
  const writes = (await target.process.writes()) - writesBefore
  const databaseMs = usedSince(databaseBefore, await options.databaseCpu.sample())
  const statuses = Object.keys(result.statusCodeStats)
  if (result.errors > 0 || statuses.some((s) => Number(s) !== request.expected)) {
    throw new Error(`${target.name}: expected only ${request.expected}, got ${JSON.stringify(result.statusCodeStats)} and ${result.errors} errors`)
  }
  // No request completed (a stalled target): no per-request figure, rather than one divided by 1.
  const total = result.requests.total > 0 ? result.requests.total : Number.NaN
  return {
    perSecond: result.requests.total / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: result.requests.total,
    cpuMsPerRequest: cpuMs / total,
    mainThreadCpuMsPerRequest: mainThreadMs / total,
    writesPerRequest: writes / total,
    databaseCpuMsPerRequest: databaseMs / total,
  }
}

export async function expectStatus(url: string, key: string, status: number, body = BODY): Promise<void> {
  const response = await fetch(url, { method: 'POST', headers: headers(key), body })
  await response.arrayBuffer()
  if (response.status !== status) throw new Error(`setting up ${key} on ${url}: expected ${status}, got ${response.status}`)
}

export async function waitForStatus(url: string, key: string, status: number): Promise<void> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const response = await fetch(url, { method: 'POST', headers: headers(key), body: BODY })
    await response.arrayBuffer()
    if (response.status === status) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`${key} never answered ${status} on ${url}`)
}

/**
 * Holds requests in flight, each on a `holder` whose provider never answers, so that every
 * other request with its key is a 409. A new key for every run: a request held longer than the
 * HTTP client's own timeouts would end, and its claim would be suspended and taken over. One
 * connection for every wait: a shared server has few to spare.
 */
export function createHolds(databaseUrl: string): { hold(holderUrl: string, schema: string, targetUrl: string): Promise<string>; release(): Promise<void> } {
  const held = new AbortController()
  const holding: Array<Promise<unknown>> = []
  let holds = 0
  let client: pg.Client | undefined
  const claimed = async (schema: string, key: string) => {
    if (!client) {
      client = new pg.Client({ connectionString: databaseUrl })
      client.on('error', (error) => process.stderr.write(`bench: the holds' connection ended: ${error.message}\n`))
      await client.connect()
    }
    for (let attempt = 0; attempt < 200; attempt++) {
      const { rowCount } = await client.query(`SELECT 1 FROM "${schema}".idempotency_key WHERE key = $1 AND status = 'in_progress'`, [key])
      if (rowCount === 1) return
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
    throw new Error(`nobody ever claimed ${key} under ${schema}`)
  }
  return {
    async hold(holderUrl, schema, targetUrl) {
      const key = `bench-conflict-${process.pid}-${holds++}`
      holding.push(fetch(holderUrl, { method: 'POST', headers: headers(key), body: BODY, signal: held.signal }).catch(() => undefined))
      // Only once the holder's claim is committed may anyone else send the key, or they would claim it.
      await claimed(schema, key)
      await waitForStatus(targetUrl, key, 409)
      return key
    },
    async release() {
      held.abort()
      await Promise.all(holding)
      await client?.end()
    },
  }
}

/** The run's entries (`pattern`, e.g. its schema's namespace `oncely:<schema>:*`): the shared Redis keeps nothing of a bench. */
export async function deleteRedisEntries(redisUrl: string, pattern: string): Promise<void> {
  const { Redis } = await import('ioredis')
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 })
  try {
    let cursor = '0'
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
      cursor = next
      if (keys.length > 0) await redis.del(...keys)
    } while (cursor !== '0')
  } finally {
    redis.disconnect()
  }
}
