// Issue 23, point 2: what `waitMs` does to the duplicates of a request still running.
//
//   node --import tsx bench/wait-duplicates.ts        (DATABASE_URL, or an embedded PostgreSQL)
//
// Each round sends one request whose handler takes 20–100 ms, then, once it runs, duplicates of
// it. Without waitMs a duplicate gets 409 and, as the client does, retries after Retry-After; with
// waitMs it waits and gets the replay, woken by its reads alone (`listen: false`) or by the
// completion's NOTIFY (`listen: true`, one shared LISTEN connection out of the pool while someone
// waits). All modes run in this one process against one database, over real HTTP (oncely/node on
// port 0), on a pool of 8 connections: waiting holds none.
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import pg from 'pg'
import { withIdempotency } from '../src/adapters/node.js'
import { createEngine, type IdempotencyStore } from '../src/index.js'
import { createPostgresStore, migrate, type Queryable } from '../src/store/postgres/index.js'
import { openBenchDatabase } from './database.js'
import { percentile } from './stats.js'

const SCHEMA = 'bench_wait'
const ROUNDS = Number(process.env.WAIT_BENCH_ROUNDS ?? 60)
const DUPLICATES = Number(process.env.WAIT_BENCH_DUPLICATES ?? 5)
const PARALLEL_ROUNDS = 4
const WAIT_MS = 2000

interface Mode {
  name: string
  waitMs: number
  listen: boolean
}

interface Sample {
  /** Until the client has the operation's result (after any 409 and its Retry-After). */
  resultMs: number
  /** Until the first answer, a 409 or the result. */
  firstAnswerMs: number
  conflicts: number
}

async function main(): Promise<void> {
  const database = await openBenchDatabase()
  const pool = new pg.Pool({ connectionString: database.url, max: 8 })
  // The database is dropped WITH (FORCE) at the end: an idle client's termination is expected.
  pool.on('error', () => {})
  try {
    await migrate({ pool, schema: SCHEMA })
    const lines = [`wait-duplicates: PostgreSQL ${database.version} (${database.where}), ${ROUNDS} rounds × ${DUPLICATES} duplicates, handler 20–100 ms, pool of 8`]
    const results: Array<{ mode: Mode; samples: Sample[]; reads: number }> = []
    const modes: Mode[] = [
      { name: 'waitMs 0 (409, retry after Retry-After)', waitMs: 0, listen: false },
      { name: `waitMs ${WAIT_MS}, reads only (listen: false)`, waitMs: WAIT_MS, listen: false },
      { name: `waitMs ${WAIT_MS}, LISTEN/NOTIFY (listen: true)`, waitMs: WAIT_MS, listen: true },
    ]
    for (const mode of modes) {
      results.push({ mode, ...(await runMode(pool, mode)) })
    }
    for (const { mode, samples, reads } of results) {
      const result = samples.map((sample) => sample.resultMs)
      const first = samples.map((sample) => sample.firstAnswerMs)
      const conflicted = samples.filter((sample) => sample.conflicts > 0).length
      lines.push(
        `  ${mode.name.padEnd(46)} result p50 ${fmt(percentile(result, 50))} p99 ${fmt(percentile(result, 99))} | first answer p99 ${fmt(percentile(first, 99))} | 409s ${conflicted}/${samples.length} | row reads per duplicate ${(reads / samples.length).toFixed(1)}`,
      )
    }
    const [without = 0, polled = 1, notified = 1] = results.map(({ samples }) => percentile(samples.map((sample) => sample.resultMs), 99))
    lines.push(`  p99 of a duplicate's result, without waitMs ÷ with waitMs (reads only): ${(without / polled).toFixed(1)}×; ÷ with waitMs and LISTEN: ${(without / notified).toFixed(1)}×`)
    lines.push(`  p99 with waitMs, reads only ÷ with LISTEN: ${(polled / notified).toFixed(1)}×`)
    process.stdout.write(`${lines.join('\n')}\n`)
  } finally {
    await pool.end()
    await database.close()
  }
}

async function runMode(pool: pg.Pool, mode: Mode): Promise<{ samples: Sample[]; reads: number }> {
  const base = createPostgresStore({ pool, schema: SCHEMA, listen: mode.listen })
  let reads = 0
  const store: IdempotencyStore<Queryable> = { ...base, read: async (scope, key) => (reads++, base.read(scope, key)) }
  const engine = createEngine({ store, staleAfterMs: 30_000 })
  const started = new Map<string, () => void>()
  const server = createServer(
    withIdempotency({ engine, scope: 'global', waitMs: mode.waitMs, log: () => {} }, async (req, res) => {
      const key = String(req.headers['idempotency-key'])
      started.get(key)?.()
      await new Promise((resolve) => setTimeout(resolve, 20 + Math.random() * 80))
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: key }))
    }),
  )
  const port = await listen(server)
  const samples: Sample[] = []
  try {
    let next = 0
    const worker = async () => {
      while (next < ROUNDS) {
        const key = `${mode.waitMs}-${mode.listen}-${next++}`
        const running = new Promise<void>((resolve) => started.set(key, resolve))
        const first = send(port, key)
        await running
        samples.push(...(await Promise.all(Array.from({ length: DUPLICATES }, () => duplicate(port, key)))))
        await first
        started.delete(key)
      }
    }
    await Promise.all(Array.from({ length: PARALLEL_ROUNDS }, worker))
  } finally {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
  return { samples, reads }
}

/** A duplicate as a well-behaved client sends it: after a 409, again once Retry-After has passed. */
async function duplicate(port: number, key: string): Promise<Sample> {
  const sentAt = performance.now()
  let firstAnswerMs: number | undefined
  let conflicts = 0
  for (;;) {
    const response = await send(port, key)
    firstAnswerMs ??= performance.now() - sentAt
    if (response.status !== 409) {
      if (response.status !== 201) throw new Error(`a duplicate got ${response.status}`)
      return { resultMs: performance.now() - sentAt, firstAnswerMs, conflicts }
    }
    conflicts++
    await new Promise((resolve) => setTimeout(resolve, Number(response.headers.get('retry-after') ?? 1) * 1000))
  }
}

async function send(port: number, key: string): Promise<Response> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ amount: 1000 }),
  })
  await response.arrayBuffer()
  return response
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return (server.address() as AddressInfo).port
}

const fmt = (ms: number) => `${ms.toFixed(0).padStart(5)} ms`

await main()
