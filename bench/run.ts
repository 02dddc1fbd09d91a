/**
 * `npm run bench`: what oncely costs per request, as ratios against a baseline measured in the
 * same run on the same database (style rule 22), and the round trips each outcome takes
 * (DESIGN.md's cost budget). Not a test: it prints, it asserts nothing.
 *
 * Baselines: `SELECT` of one row by primary key (the cheapest round trip) and an autocommit
 * `INSERT` of one row (the cheapest write), on a table shaped like oncely's.
 */
import { mkdtemp, chmod, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../src/embedded-postgres/start.js'
import { createEngine, fingerprintRequest, type Engine } from '../src/index.js'
import { createPostgresStore, migrate, type Queryable } from '../src/store/postgres/index.js'
import { countingPool } from '../test/helpers/counting-pool.js'

const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 2000)
const response = { status: 201, headers: [['content-type', 'application/json']] as [string, string][], body: Buffer.from('{"id":"ch_1","amount":1000}') }

interface Sample {
  name: string
  median: number
  p99: number
  roundTrips: number
}

async function measure(name: string, counter: ReturnType<typeof countingPool>, op: (i: number) => Promise<void>): Promise<Sample> {
  for (let i = 0; i < Math.min(200, ITERATIONS); i++) await op(-i - 1)
  const times: number[] = []
  counter.reset()
  for (let i = 0; i < ITERATIONS; i++) {
    const start = performance.now()
    await op(i)
    times.push(performance.now() - start)
  }
  const roundTrips = counter.statements.length / ITERATIONS
  times.sort((a, b) => a - b)
  return { name, median: times[Math.floor(times.length / 2)] ?? 0, p99: times[Math.floor(times.length * 0.99)] ?? 0, roundTrips }
}

async function main(): Promise<void> {
  let embedded: EmbeddedDatabase | undefined
  let dataRoot: string | undefined
  let url = process.env.DATABASE_URL || undefined
  if (!url) {
    dataRoot = await mkdtemp(path.join(tmpdir(), 'oncely-bench-'))
    await chmod(dataRoot, 0o755)
    embedded = await startEmbeddedPostgres({ dataDir: path.join(dataRoot, 'data'), ephemeral: true })
    url = embedded.url
  }
  const database = `oncely_bench_${process.pid}`
  const admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${database}`)
  const benchUrl = new URL(url)
  benchUrl.pathname = `/${database}`
  const pool = new pg.Pool({ connectionString: benchUrl.toString(), max: 4 })
  try {
    await migrate({ pool })
    await pool.query('CREATE TABLE baseline (user_id text, key text, body bytea, PRIMARY KEY (user_id, key))')
    await pool.query(`INSERT INTO baseline VALUES ('u', 'one', '\\x00')`)
    const counter = countingPool(pool)
    const engine: Engine<Queryable> = createEngine({ store: createPostgresStore({ pool: counter }) })
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
    const other = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 2000 } })

    const completed = await engine.begin({ scope: 'u', key: 'done', fingerprint })
    if (completed.kind === 'execute') await completed.execution.complete(response)
    const running = await engine.begin({ scope: 'u', key: 'running', fingerprint })

    const samples: Sample[] = []
    samples.push(await measure('baseline: SELECT by primary key', counter, async () => {
      await counter.query({ name: 'bench_select', text: 'SELECT body FROM baseline WHERE user_id = $1 AND key = $2', values: ['u', 'one'] })
    }))
    samples.push(await measure('baseline: INSERT one row', counter, async (i) => {
      await counter.query({ name: 'bench_insert', text: 'INSERT INTO baseline VALUES ($1, $2, $3)', values: ['u', `b${i}`, response.body] })
    }))
    samples.push(await measure('replay', counter, async () => {
      const d = await engine.begin({ scope: 'u', key: 'done', fingerprint })
      if (d.kind !== 'replay') throw new Error(d.kind)
    }))
    samples.push(await measure('conflict (409)', counter, async () => {
      const d = await engine.begin({ scope: 'u', key: 'running', fingerprint })
      if (d.kind !== 'conflict') throw new Error(d.kind)
    }))
    samples.push(await measure('mismatch (422)', counter, async () => {
      const d = await engine.begin({ scope: 'u', key: 'done', fingerprint: other })
      if (d.kind !== 'mismatch') throw new Error(d.kind)
    }))
    samples.push(await measure('fresh key: claim + completion', counter, async (i) => {
      const d = await engine.begin({ scope: 'u', key: `fresh${i}`, fingerprint })
      if (d.kind !== 'execute') throw new Error(d.kind)
      await d.execution.complete(response)
    }))
    samples.push(await measure('fresh key: claim + one step + completion', counter, async (i) => {
      const d = await engine.begin({ scope: 'u', key: `stepped${i}`, fingerprint })
      if (d.kind !== 'execute') throw new Error(d.kind)
      await d.execution.step('charge', async ({ idempotencyKey }) => ({ id: idempotencyKey.slice(0, 8) }))
      await d.execution.complete(response)
    }))
    if (running.kind === 'execute') await running.execution.release()

    const select = samples[0]?.median ?? 1
    const insert = samples[1]?.median ?? 1
    const version = (await pool.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version
    process.stdout.write(`oncely bench: PostgreSQL ${version} (${embedded ? 'embedded' : 'DATABASE_URL'}), ${ITERATIONS} sequential iterations each\n\n`)
    process.stdout.write('| operation | median ms | p99 ms | × SELECT | × INSERT | round trips |\n| --- | ---: | ---: | ---: | ---: | ---: |\n')
    for (const s of samples) {
      process.stdout.write(`| ${s.name} | ${s.median.toFixed(3)} | ${s.p99.toFixed(3)} | ${(s.median / select).toFixed(2)} | ${(s.median / insert).toFixed(2)} | ${s.roundTrips.toFixed(2)} |\n`)
    }
  } finally {
    await pool.end()
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
    await admin.end()
    await embedded?.stop()
    if (dataRoot) await rm(dataRoot, { recursive: true, force: true })
  }
}

await main()
