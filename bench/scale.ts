import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { createEngine, fingerprintRequest, type Engine, type StoredResponse } from '../src/index.js'
import { sweepExpiredKeys } from '../src/ops/index.js'
import { storedFingerprint } from '../src/engine/fingerprint.js'
import { createPostgresStore, migrate, type Queryable } from '../src/store/postgres/index.js'
import { quoteSchema } from '../src/store/postgres/schema-name.js'
import { buildStatements } from '../src/store/postgres/statements.js'
import { DEFAULT_LOCK_TIMEOUT_MS } from '../src/store/postgres/store.js'
import { closedLoop, interleaved } from './closed-loop.js'
import { figure, type Figure } from './report.js'
import { median, percentile } from './stats.js'

const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_1","amount":1000}') }
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const BATCH_ROWS = 500_000
const SWEEP_BATCH = 1000
const SWEEP_RUN = 100
const SWEEP_DEADLINE_MS = 20 * 60_000
const SCHEMAS = { empty: 'bench_scale_empty', full: 'bench_scale_full' } as const
type Table = keyof typeof SCHEMAS

export interface ScaleResult {
  figures: Figure[]
  /** What explains the figures: generation time, sizes, plans, cache hits, the sweep's batches. */
  details: Record<string, unknown>
}

/**
 * Scale (issue 11, benchmark 4; behind `--scale`): claim and replay latency on a table of
 * `rows` keys against an empty one, measured interleaved on two schemas of one database; then
 * the sweeper deleting the expired tenth of those rows in batches while claims run, the claims'
 * p99 during the sweep against without it. Each claim measured is completed afterwards, outside
 * its timing, as a request would: a claim left running would renew its lease every
 * `leaseRenewMs`, and tens of thousands of them renewing at once swamp the pool. Everything
 * generated is dropped at the end.
 */
export async function scaleBench(url: string, options: { rows: number; connections: number; seconds: number; rounds: number }): Promise<ScaleResult> {
  const pool = new pg.Pool({ connectionString: url, max: options.connections + 2 })
  // An idle connection the server closes (the database dropped under it at the end) must not
  // crash the run: the pool replaces it.
  pool.on('error', (error) => process.stderr.write(`scale: an idle connection failed: ${error.message}\n`))
  const details: Record<string, unknown> = {}
  try {
    const engines: Record<Table, Engine<Queryable>> = { empty: await engineOn(pool, SCHEMAS.empty), full: await engineOn(pool, SCHEMAS.full) }
    const expired = Math.floor(options.rows / 10)
    const generation = await generateTable(pool, options.rows, expired)
    const size = generation.size
    details.generation = generation
    for (const engine of Object.values(engines)) await prepareKeys(engine)
    details.plans = await explainAll(pool)

    const errors: Record<string, number> = {}
    // Only `begin` is timed; a claimed key is then completed, outside the timing.
    const timed = async (label: string, engine: Engine<Queryable>, key: (i: number) => string, expect: 'execute' | 'replay', seconds: number, loops = options.connections) => {
      const latencies: number[] = []
      await closedLoop(loops, seconds, async (i) => {
        const began = performance.now()
        let decision: Awaited<ReturnType<Engine<Queryable>['begin']>>
        try {
          decision = await engine.begin({ scope: 'bench', key: key(i), fingerprint })
        } catch (error) {
          // A claim that timed out is a data point (its latency is the time it took to fail).
          latencies.push(performance.now() - began)
          errors[label] = (errors[label] ?? 0) + 1
          process.stderr.write(`scale: ${label}: ${error instanceof Error ? error.message : String(error)}\n`)
          return
        }
        latencies.push(performance.now() - began)
        if (decision.kind !== expect) throw new Error(`${label}: expected ${expect}, the engine answered ${decision.kind}`)
        if (decision.kind === 'execute') await decision.execution.complete(response)
      })
      return latencies
    }

    // Warm-up: every connection opened and every statement prepared, on both tables.
    for (const table of ['empty', 'full'] as const) {
      await timed('warm-up', engines[table], (i) => `warm-${i}`, 'execute', 1)
      await timed('warm-up', engines[table], () => 'done', 'replay', 1)
    }
    const statioBefore = await cacheCounters(pool)

    const latencies: Record<string, number[][]> = {}
    const variants = ['empty claim', 'full claim', 'empty replay', 'full replay'] as const
    await interleaved(options.rounds, variants, async (variant, round) => {
      const [table, kind] = variant.split(' ') as [Table, 'claim' | 'replay']
      const run =
        kind === 'claim'
          ? await timed(variant, engines[table], (i) => `claim-${round}-${i}`, 'execute', options.seconds)
          : await timed(variant, engines[table], () => 'done', 'replay', options.seconds)
      ;(latencies[variant] ??= []).push(run)
      process.stderr.write(`scale: ${variant} round ${round}: ${run.length} ops, p50 ${percentile(run, 50).toFixed(2)} ms, p99 ${percentile(run, 99).toFixed(2)} ms\n`)
    })
    details.cacheDuringLatency = diffCounters(statioBefore, await cacheCounters(pool))
    // The same claims from one loop, interleaved: what the table's size costs the statement
    // itself, with less of the queueing on the shared cores that the p99 of 8 loops carries.
    const sequential: Record<string, number[][]> = {}
    await interleaved(options.rounds, ['empty', 'full'] as const, async (table, round) => {
      ;(sequential[table] ??= []).push(await timed(`sequential ${table}`, engines[table], (i) => `sequential-${round}-${i}`, 'execute', 2, 1))
    })
    details.sequentialClaims = Object.fromEntries(
      Object.entries(sequential).map(([table, runs]) => [
        table,
        { ops: runs.map((r) => r.length), p50: runs.map((r) => Number(percentile(r, 50).toFixed(2))), p99: runs.map((r) => Number(percentile(r, 99).toFixed(2))) },
      ]),
    )
    const figures: Figure[] = []
    for (const kind of ['claim', 'replay'] as const) {
      for (const p of [50, 99]) {
        const at = (variant: string) => (latencies[variant] ?? []).map((runs) => percentile(runs, p))
        figures.push(
          figure(
            {
              section: 'scale',
              name: `${kind} p${p} on ${options.rows} rows (${size})`,
              unit: 'ms',
              runs: at(`full ${kind}`),
              baseline: { name: 'empty table', value: median(at(`empty ${kind}`)) },
              target: { compare: '<=', ratio: 1.2 },
              extra: { ops: (latencies[`full ${kind}`] ?? []).map((r) => r.length).join(' '), 'baseline ops': (latencies[`empty ${kind}`] ?? []).map((r) => r.length).join(' ') },
            },
            median(at(`full ${kind}`)),
          ),
        )
      }
    }

    // The sweep: claims on the full table without a sweep, then while the sweeper deletes the
    // expired rows in batches, then without again.
    const store = createPostgresStore({ pool, schema: SCHEMAS.full })
    const claims = (label: string) => timed(label, engines.full, (i) => `${label}-${i}`, 'execute', options.seconds)
    const before = await claims('before-sweep')
    const batchMs: number[] = []
    let sweepError: string | undefined
    let sweeping = true
    const sweepStarted = performance.now()
    const timedStore = {
      async sweepExpired(batchSize: number) {
        const began = performance.now()
        const count = await store.sweepExpired(batchSize)
        batchMs.push(performance.now() - began)
        if (batchMs.length % 100 === 0) process.stderr.write(`scale: sweep batch ${batchMs.length}: ${(performance.now() - began).toFixed(1)} ms\n`)
        return count
      },
    }
    // Runs of SWEEP_RUN batches (as a scheduled sweeper would), until nothing expired is left or
    // the deadline: a sweep slower than that is reported as it is, with the rows it left.
    const sweepDeadline = performance.now() + SWEEP_DEADLINE_MS
    const sweep = (async () => {
      let deleted = 0
      let batches = 0
      try {
        while (performance.now() < sweepDeadline) {
          const run = await sweepExpiredKeys(timedStore, { batchSize: SWEEP_BATCH, maxBatches: SWEEP_RUN })
          deleted += run.deleted
          batches += run.batches
          if (run.deleted < SWEEP_RUN * SWEEP_BATCH) break
        }
      } catch (error) {
        sweepError = error instanceof Error ? error.message : String(error)
      }
      return { deleted, batches }
    })().finally(() => (sweeping = false))
    const during: number[] = []
    for (let round = 0; sweeping; round++) during.push(...(await claims(`during-sweep-${round}`)))
    const { deleted, batches } = await sweep
    const sweepSeconds = (performance.now() - sweepStarted) / 1000
    const after = await claims('after-sweep')
    const left = (await pool.query<{ n: number }>(`SELECT count(*)::integer AS n FROM ${SCHEMAS.full}.idempotency_key WHERE expires_at <= now()`)).rows[0]?.n
    details.sweep = {
      deleted,
      batches,
      batchSize: SWEEP_BATCH,
      seconds: Number(sweepSeconds.toFixed(1)),
      expiredLeft: left,
      error: sweepError,
      batchMs: summary(batchMs),
      // The batch times in tenths of the sweep, to show whether they grow as it goes.
      batchMsByTenth: tenths(batchMs),
      claims: { before: before.length, during: during.length, after: after.length },
    }
    details.errors = errors
    figures.push(
      figure(
        {
          section: 'scale',
          name: `claim p99 while the sweeper deletes ${deleted} expired rows in batches of ${SWEEP_BATCH} (${sweepSeconds.toFixed(0)} s)`,
          unit: 'ms',
          runs: [percentile(during, 99)],
          baseline: { name: 'no sweep (before and after)', value: percentile([...before, ...after], 99) },
          target: { compare: '<=', ratio: 2 },
          extra: { 'p50 ms': percentile(during, 50), 'baseline p50 ms': percentile([...before, ...after], 50), ops: during.length, 'baseline ops': before.length + after.length },
        },
        percentile(during, 99),
      ),
    )
    return { figures, details }
  } finally {
    // Gigabytes on a shared disk: dropped here, whatever happened (the database goes too, at the end of the run).
    for (const schema of Object.values(SCHEMAS)) await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
    await pool.end()
  }
}

async function engineOn(pool: pg.Pool, schema: string): Promise<Engine<Queryable>> {
  await migrate({ pool, schema })
  return createEngine<Queryable>({ store: createPostgresStore({ pool, schema }) })
}

async function prepareKeys(engine: Engine<Queryable>): Promise<void> {
  const decision = await engine.begin({ scope: 'bench', key: 'done', fingerprint })
  if (decision.kind === 'execute') await decision.execution.complete(response)
}

/** Generates the full table, then vacuums, analyzes and checkpoints it, timing each step. */
async function generateTable(pool: pg.Pool, rows: number, expired: number): Promise<Record<string, unknown> & { size: string }> {
  const seconds = (since: number) => Number(((performance.now() - since) / 1000).toFixed(1))
  let started = performance.now()
  for (let from = 0; from < rows; from += BATCH_ROWS) {
    await generate(pool, SCHEMAS.full, from, Math.min(rows, from + BATCH_ROWS), expired)
    process.stderr.write(`scale: ${Math.min(rows, from + BATCH_ROWS)} of ${rows} rows generated (${seconds(started)} s)\n`)
  }
  const insertSeconds = seconds(started)
  started = performance.now()
  // autovacuum may be off (it is on the CI machine): the planner needs the statistics, and the
  // visibility map and hint bits are set here rather than by the first claims measured.
  await pool.query(`VACUUM ANALYZE ${SCHEMAS.full}.idempotency_key`)
  const vacuumSeconds = seconds(started)
  started = performance.now()
  // Gigabytes just written: flush them now, not under the first claims measured (or timed out).
  await pool.query('CHECKPOINT')
  const checkpointSeconds = seconds(started)
  const sizes = await tableSizes(pool, SCHEMAS.full)
  process.stderr.write(`scale: ${rows} rows (${sizes.total}) inserted in ${insertSeconds} s, vacuum analyze ${vacuumSeconds} s, checkpoint ${checkpointSeconds} s\n`)
  return { rows, expired, insertSeconds, vacuumSeconds, checkpointSeconds, sizes, size: sizes.total }
}

/**
 * Rows `from` to `to` of the generated table: completed keys spread over 100 000 users, the
 * first `expired` of them past their expiry (what the sweeper deletes).
 */
async function generate(pool: pg.Pool, schema: string, from: number, to: number, expired: number): Promise<void> {
  await pool.query({
    text: `INSERT INTO ${schema}.idempotency_key
             (scope, key, fingerprint, status, claim_id, response_status, response_headers, response_body, created_at, updated_at, expires_at)
           SELECT 'u' || (i % 100000), 'key-' || i, md5(i::text) || md5((i + 1)::text), 'completed', gen_random_uuid(), 201,
                  '[["content-type","application/json"]]'::jsonb, convert_to('{"id":"ch_' || i || '","amount":1000}', 'UTF8'),
                  now() - interval '2 days', now() - interval '2 days',
                  CASE WHEN i < $3 THEN now() - interval '1 hour' ELSE now() + interval '1 day' END
             FROM generate_series($1::bigint, $2::bigint - 1) AS i`,
    values: [from, to, expired],
  })
}

async function tableSizes(pool: pg.Pool, schema: string): Promise<Record<string, string> & { total: string }> {
  const { rows } = await pool.query<{ name: string; size: string }>(
    `SELECT 'total' AS name, pg_size_pretty(pg_total_relation_size(c.oid)) AS size FROM pg_class c WHERE c.oid = $1::regclass
     UNION ALL SELECT 'heap', pg_size_pretty(pg_relation_size(c.oid)) FROM pg_class c WHERE c.oid = $1::regclass
     UNION ALL SELECT i.indexrelid::regclass::text, pg_size_pretty(pg_relation_size(i.indexrelid)) FROM pg_index i WHERE i.indrelid = $1::regclass`,
    [`${schema}.idempotency_key`],
  )
  const sizes: Record<string, string> = Object.fromEntries(rows.map((r) => [r.name, r.size]))
  return { ...sizes, total: sizes.total ?? 'unknown' }
}

/**
 * EXPLAIN (ANALYZE, BUFFERS) of the claim (a new key, and a completed one: the replay's path)
 * on both tables and of one sweep batch on the full one, each in a transaction rolled back.
 */
async function explainAll(pool: pg.Pool): Promise<Record<string, string[]>> {
  const plans: Record<string, string[]> = {}
  const client = await pool.connect()
  try {
    for (const [table, schema] of Object.entries(SCHEMAS)) {
      const sql = buildStatements(quoteSchema(schema), undefined)
      const claimValues = (key: () => string) => () => ['bench', key(), storedFingerprint(fingerprint), 86_400_000, randomUUID(), randomUUID(), DEFAULT_LOCK_TIMEOUT_MS, null]
      const explain = async (name: string, text: string, values: () => unknown[]) => {
        await client.query('BEGIN')
        try {
          // Twice: the first run pays for the plan and a cold cache.
          await client.query({ text: `EXPLAIN (ANALYZE, BUFFERS) ${text}`, values: values() })
          const { rows } = await client.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN (ANALYZE, BUFFERS) ${text}`, values: values() })
          plans[name] = rows.map((r) => r['QUERY PLAN'])
        } finally {
          await client.query('ROLLBACK')
        }
      }
      await explain(`${table} claim (new key)`, sql.claim.text, claimValues(() => `explain-${randomUUID()}`))
      await explain(`${table} claim (completed key: replay)`, sql.claim.text, claimValues(() => 'done'))
      if (table === 'full') await explain('full sweep batch', sql.sweepExpired.text, () => [SWEEP_BATCH])
    }
  } finally {
    client.release()
  }
  return plans
}

interface CacheCounters {
  [schema: string]: { heapRead: number; heapHit: number; indexRead: number; indexHit: number }
}

/** Buffer hits and reads (reads may still come from the OS page cache) of both tables. */
async function cacheCounters(pool: pg.Pool): Promise<CacheCounters> {
  const { rows } = await pool.query<{ schemaname: string; heap_blks_read: string; heap_blks_hit: string; idx_blks_read: string; idx_blks_hit: string }>(
    `SELECT schemaname, heap_blks_read, heap_blks_hit, idx_blks_read, idx_blks_hit FROM pg_statio_user_tables WHERE relname = 'idempotency_key' AND schemaname = ANY($1)`,
    [Object.values(SCHEMAS)],
  )
  return Object.fromEntries(
    rows.map((r) => [r.schemaname, { heapRead: Number(r.heap_blks_read), heapHit: Number(r.heap_blks_hit), indexRead: Number(r.idx_blks_read), indexHit: Number(r.idx_blks_hit) }]),
  )
}

function diffCounters(before: CacheCounters, after: CacheCounters): CacheCounters {
  return Object.fromEntries(
    Object.entries(after).map(([schema, a]) => {
      const b = before[schema] ?? { heapRead: 0, heapHit: 0, indexRead: 0, indexHit: 0 }
      return [schema, { heapRead: a.heapRead - b.heapRead, heapHit: a.heapHit - b.heapHit, indexRead: a.indexRead - b.indexRead, indexHit: a.indexHit - b.indexHit }]
    }),
  )
}

function summary(values: readonly number[]): Record<string, number> {
  const round = (v: number) => Number(v.toFixed(2))
  return { count: values.length, p50: round(percentile(values, 50)), p90: round(percentile(values, 90)), p99: round(percentile(values, 99)), max: round(Math.max(...values)) }
}

function tenths(values: readonly number[]): number[] {
  const size = Math.ceil(values.length / 10)
  if (size === 0) return []
  return Array.from({ length: Math.ceil(values.length / size) }, (_, i) => Number(median(values.slice(i * size, (i + 1) * size)).toFixed(2)))
}
