import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { createEngine, fingerprintRequest, type Engine, type StoredResponse } from '../src/index.js'
import { storedFingerprint } from '../src/engine/fingerprint.js'
import { createPostgresStore, migrate, type PostgresStore, type Queryable } from '../src/store/postgres/index.js'
import { quoteSchema } from '../src/store/postgres/schema-name.js'
import { countingPool, type CountingPool } from '../test/helpers/counting-pool.js'
import { closedLoop, interleaved } from './closed-loop.js'
import { explainPlans, type PlanCheck } from './partitions-plans.js'
import { figure, type Figure } from './report.js'
import { median, percentile } from './stats.js'

const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_1","amount":1000}') }
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const BATCH_ROWS = 500_000
const MAX_SCOPES = 100_000
const MAX_SWEEP_BATCH = 1000
const SWEEP_BATCHES_PER_RUN = 5
const ROUND_TRIP_ITERATIONS = 20
export const TABLES = ['plain', 'partitioned'] as const
export type Table = (typeof TABLES)[number]
export const OPERATIONS = ['claim', 'replay', 'completion', 'sweep batch'] as const
export type Operation = (typeof OPERATIONS)[number]

export interface PartitionsOptions {
  rows: number
  /** Partitions of the partitioned table (`migrate({ partitions })`). */
  partitions: number
  /** Concurrent loops for the claims and replays. */
  loops: number
  seconds: number
  rounds: number
  /** The two schemas, created and dropped by the run. (Default: bench_partitions_plain, bench_partitions_hash) */
  schemas?: Record<Table, string>
  /** Progress lines. (Default: to stderr) */
  log?: (line: string) => void
}

export interface PartitionsResult {
  /** Each operation's latency partitioned against plain, then the load time and the size. */
  figures: Figure[]
  /** Round trips per operation, counted on the pool, sequentially (the same on both, or the layout changed a statement). */
  roundTrips: Record<Operation, Record<Table, number>>
  /** The relations each statement's plan reads or writes, bound as a request binds it. */
  plans: PlanCheck[]
  /** Heap, indexes and total in bytes, and the rows each table holds after the load. */
  sizes: Record<Table, { heapBytes: number; indexBytes: number; totalBytes: number; relations: number; rowsLoaded: number }>
  load: Record<Table, { insertSeconds: number; analyzeSeconds: number }> & { checkpointSeconds: number; scopes: number; expired: number }
  /** Rows each table's measured sweep batches deleted, in all. */
  swept: Record<Table, number>
  /** Rows per sweep batch: 1000, fewer on a small table. */
  sweepBatch: number
}

/**
 * Hash partitions by scope against a plain table (issue 24, point 6): `rows` completed keys over
 * up to 100 000 scopes loaded into both (INSERT … SELECT generate_series, interleaved batch by
 * batch), vacuumed and analyzed; then, interleaved round by round, a fresh key's claim and its
 * completion, the replay of a loaded key picked at random, and the sweeper's batch; the plans of
 * every statement with its scope bound; round trips per operation; sizes. Both schemas are
 * dropped at the end.
 */
export async function partitionsBench(url: string, options: PartitionsOptions): Promise<PartitionsResult> {
  const schemas = options.schemas ?? { plain: 'bench_partitions_plain', partitioned: 'bench_partitions_hash' }
  const pool = new pg.Pool({ connectionString: url, max: options.loops + 2 })
  pool.on('error', (error) => process.stderr.write(`partitions: an idle connection failed: ${error.message}\n`))
  const log = options.log ?? ((line: string) => process.stderr.write(`partitions: ${line}\n`))
  const dropAll = async () => {
    for (const schema of Object.values(schemas)) await pool.query(`DROP SCHEMA IF EXISTS ${quoteSchema(schema)} CASCADE`)
  }
  try {
    await dropAll()
    await migrate({ pool, schema: schemas.plain })
    await migrate({ pool, schema: schemas.partitioned, partitions: options.partitions })
    const scopes = Math.max(1, Math.min(MAX_SCOPES, options.rows))
    const expired = Math.floor(options.rows / 10)
    // The sweeper's batch (1000), smaller when the expired rows would run out before the last
    // batch measured: a batch that finds nothing is no figure.
    const sweepBatch = Math.max(1, Math.min(MAX_SWEEP_BATCH, Math.floor(expired / (options.rounds * SWEEP_BATCHES_PER_RUN + 2))))
    const load = await loadTables(pool, schemas, options.rows, scopes, expired, log)
    // Measured before the operations, which add and sweep rows.
    const sizes = { plain: await tableSize(pool, schemas.plain), partitioned: await tableSize(pool, schemas.partitioned) }

    const counters = {} as Record<Table, CountingPool>
    const stores = {} as Record<Table, PostgresStore>
    const engines = {} as Record<Table, Engine<Queryable>>
    for (const table of TABLES) {
      counters[table] = countingPool(pool)
      stores[table] = createPostgresStore({ pool: counters[table], schema: schemas[table] })
      engines[table] = createEngine<Queryable>({ store: stores[table] })
    }
    const liveKey = () => expired + Math.floor(Math.random() * (options.rows - expired))
    const freshScope = () => `u${Math.floor(Math.random() * scopes)}`

    const claimOnce = async (table: Table, key: string) => {
      const decision = await engines[table].begin({ scope: freshScope(), key, fingerprint })
      if (decision.kind !== 'execute') throw new Error(`${table}: a fresh key answered ${decision.kind}`)
      return decision.execution
    }
    const replayOnce = async (table: Table) => {
      const i = liveKey()
      const decision = await engines[table].begin({ scope: `u${i % scopes}`, key: `key-${i}`, fingerprint })
      if (decision.kind !== 'replay') throw new Error(`${table}: loaded key ${i} answered ${decision.kind}, not replay`)
    }

    // Round trips, one operation at a time, so each count is that operation's alone.
    const roundTrips = Object.fromEntries(OPERATIONS.map((op) => [op, {}])) as PartitionsResult['roundTrips']
    for (const table of TABLES) {
      const counter = counters[table]
      const count = async (op: Operation, run: (i: number) => Promise<void>, iterations = ROUND_TRIP_ITERATIONS) => {
        let total = 0
        for (let i = 0; i < iterations; i++) {
          const before = counter.roundTrips()
          await run(i)
          total += counter.roundTrips() - before
        }
        roundTrips[op][table] = total / iterations
      }
      // The claims are held, not completed, until each completion is counted in turn.
      const held: Awaited<ReturnType<typeof claimOnce>>[] = []
      await count('claim', async (i) => void held.push(await claimOnce(table, `count-${i}`)))
      await count('completion', async (i) => held[i]?.complete(response))
      await count('replay', () => replayOnce(table))
      await count('sweep batch', async () => void (await stores[table].sweepExpired(sweepBatch)), 2)
    }

    const plans = await explainPlans(url, schemas, { scope: 'u0', loadedKey: `key-${expired}`, freshKey: () => `explain-${randomUUID()}`, sweepBatch, storedFingerprint: storedFingerprint(fingerprint) })

    // Warm-up: every connection opened and every statement prepared, on both tables.
    for (const table of TABLES) {
      await closedLoop(options.loops, Math.min(1, options.seconds), async (i) => (await claimOnce(table, `warm-${i}`)).complete(response))
      await closedLoop(options.loops, Math.min(1, options.seconds), () => replayOnce(table))
    }

    const samples = Object.fromEntries(OPERATIONS.map((op) => [op, { plain: [], partitioned: [] }])) as unknown as Record<Operation, Record<Table, number[][]>>
    const ops = Object.fromEntries(OPERATIONS.map((op) => [op, { plain: [], partitioned: [] }])) as unknown as Record<Operation, Record<Table, number[]>>
    const swept: Record<Table, number> = { plain: 0, partitioned: 0 }
    await interleaved(options.rounds, TABLES, async (table, round) => {
      const claims: number[] = []
      const completions: number[] = []
      const claimRun = await closedLoop(options.loops, options.seconds, async (i) => {
        const began = performance.now()
        const execution = await claimOnce(table, `claim-${round}-${i}`)
        const claimed = performance.now()
        await execution.complete(response)
        claims.push(claimed - began)
        completions.push(performance.now() - claimed)
      })
      const replays = await closedLoop(options.loops, options.seconds, () => replayOnce(table))
      const sweeps: number[] = []
      for (let b = 0; b < SWEEP_BATCHES_PER_RUN; b++) {
        const began = performance.now()
        swept[table] += await stores[table].sweepExpired(sweepBatch)
        sweeps.push(performance.now() - began)
      }
      const record = (op: Operation, latencies: number[], perSecond: number) => {
        samples[op][table].push(latencies)
        ops[op][table].push(Math.round(perSecond))
      }
      record('claim', claims, claimRun.perSecond)
      record('completion', completions, claimRun.perSecond)
      record('replay', replays.latencies, replays.perSecond)
      record('sweep batch', sweeps, 0)
      log(`${table} round ${round}: claim p50 ${percentile(claims, 50).toFixed(2)} ms, replay p50 ${percentile(replays.latencies, 50).toFixed(2)} ms, sweep batch p50 ${percentile(sweeps, 50).toFixed(1)} ms`)
    })

    const figures: Figure[] = []
    for (const op of OPERATIONS) {
      for (const p of op === 'sweep batch' ? [50] : [50, 99]) {
        const at = (table: Table) => samples[op][table].map((run) => percentile(run, p))
        const runs = (table: Table) => at(table).map((v) => v.toFixed(2)).join(' ')
        const extra: Record<string, string> = { 'round trips': `${roundTrips[op].partitioned} (plain ${roundTrips[op].plain})`, 'plain runs': runs('plain') }
        if (op !== 'sweep batch') extra['ops/s'] = `${ops[op].partitioned.join(' ')} (plain ${ops[op].plain.join(' ')})`
        figures.push(figure({ section: 'partitions', name: `${op} p${p}`, unit: 'ms', runs: at('partitioned'), baseline: { name: 'plain', value: median(at('plain')) }, extra }, median(at('partitioned'))))
      }
    }
    figures.push(figure({ section: 'partitions', name: 'load (INSERT … SELECT)', unit: 's', runs: [load.partitioned.insertSeconds], baseline: { name: 'plain', value: load.plain.insertSeconds } }, load.partitioned.insertSeconds))
    figures.push(figure({ section: 'partitions', name: 'VACUUM ANALYZE', unit: 's', runs: [load.partitioned.analyzeSeconds], baseline: { name: 'plain', value: load.plain.analyzeSeconds } }, load.partitioned.analyzeSeconds))
    for (const part of ['heapBytes', 'indexBytes', 'totalBytes'] as const) {
      const mib = (table: Table) => sizes[table][part] / 2 ** 20
      figures.push(figure({ section: 'partitions', name: `size: ${part.replace('Bytes', '')}`, unit: 'MiB', runs: [mib('partitioned')], baseline: { name: 'plain', value: mib('plain') } }, mib('partitioned')))
    }
    return { figures, roundTrips, plans, sizes, load, swept, sweepBatch }
  } finally {
    try {
      await dropAll()
    } finally {
      await pool.end()
    }
  }
}

/** Loads both tables batch by batch, alternating which goes first, then VACUUM ANALYZE and a CHECKPOINT. */
async function loadTables(pool: pg.Pool, schemas: Record<Table, string>, rows: number, scopes: number, expired: number, log: (line: string) => void): Promise<PartitionsResult['load']> {
  const insertMs: Record<Table, number> = { plain: 0, partitioned: 0 }
  const started = performance.now()
  for (let from = 0, batch = 0; from < rows; from += BATCH_ROWS, batch++) {
    const to = Math.min(rows, from + BATCH_ROWS)
    for (const table of batch % 2 === 0 ? TABLES : [...TABLES].reverse()) {
      const began = performance.now()
      await insertRows(pool, schemas[table], from, to, rows, scopes, expired)
      insertMs[table] += performance.now() - began
    }
    log(`${to} of ${rows} rows loaded into each (${((performance.now() - started) / 1000).toFixed(0)} s)`)
  }
  const analyzeMs: Record<Table, number> = { plain: 0, partitioned: 0 }
  for (const table of TABLES) {
    const began = performance.now()
    // The planner needs the statistics (autovacuum may be off), and the visibility map and hint
    // bits are set here rather than by the first operations measured.
    await pool.query(`VACUUM ANALYZE ${quoteSchema(schemas[table])}.idempotency_key`)
    analyzeMs[table] = performance.now() - began
  }
  const began = performance.now()
  // Gigabytes just written: flushed now, not under the first operations measured.
  await pool.query('CHECKPOINT')
  const secondsOf = (ms: number) => Number((ms / 1000).toFixed(3))
  const result = {
    plain: { insertSeconds: secondsOf(insertMs.plain), analyzeSeconds: secondsOf(analyzeMs.plain) },
    partitioned: { insertSeconds: secondsOf(insertMs.partitioned), analyzeSeconds: secondsOf(analyzeMs.partitioned) },
    checkpointSeconds: secondsOf(performance.now() - began),
    scopes,
    expired,
  }
  log(`loaded: ${JSON.stringify(result)}`)
  return result
}

/**
 * Rows `from` to `to`: completed keys of the bench's request (so each replays), row i in scope
 * `u{i mod scopes}`, so consecutive rows land in different scopes (and partitions) as a
 * service's traffic does. Expiries are spread: the first `expired` rows are past theirs, the
 * oldest first; the rest fall due over a day starting in two hours, so none expires during the
 * run (a replay measured must find its key).
 */
async function insertRows(pool: pg.Pool, schema: string, from: number, to: number, rows: number, scopes: number, expired: number): Promise<void> {
  await pool.query({
    text: `INSERT INTO ${quoteSchema(schema)}.idempotency_key
             (scope, key, fingerprint, status, claim_id, response_status, response_headers, response_body, created_at, updated_at, expires_at)
           SELECT 'u' || (i % $4), 'key-' || i, $5, 'completed', gen_random_uuid(), 201,
                  '[["content-type","application/json"]]'::jsonb, convert_to('{"id":"ch_' || i || '","amount":1000}', 'UTF8'),
                  e - interval '1 day', e - interval '1 day', e
             FROM generate_series($1::bigint, $2::bigint - 1) AS i,
                  LATERAL (SELECT now() + (i - $3) * ($6::double precision * interval '1 millisecond')
                                  + CASE WHEN i < $3 THEN interval '-1 second' ELSE interval '2 hours' END AS e) AS expiry`,
    values: [from, to, expired, scopes, storedFingerprint(fingerprint), 86_400_000 / rows],
  })
}

/** Heap and index bytes of the key table, summed over its partitions when it has them. */
async function tableSize(pool: pg.Pool, schema: string): Promise<PartitionsResult['sizes'][Table]> {
  const table = `${quoteSchema(schema)}.idempotency_key`
  const { rows } = await pool.query<{ heap: string; indexes: string; total: string; relations: number }>(
    `WITH leaves AS (
       SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf
       UNION SELECT oid FROM pg_class WHERE oid = $1::regclass AND relkind = 'r'
     )
     SELECT sum(pg_relation_size(relid))::text AS heap, sum(pg_indexes_size(relid))::text AS indexes,
            sum(pg_total_relation_size(relid))::text AS total, count(*)::integer AS relations
       FROM leaves`,
    [table],
  )
  const { rows: counted } = await pool.query<{ n: number }>(`SELECT count(*)::integer AS n FROM ${table} WHERE key LIKE 'key-%'`)
  const row = rows[0]
  return { heapBytes: Number(row?.heap), indexBytes: Number(row?.indexes), totalBytes: Number(row?.total), relations: row?.relations ?? 0, rowsLoaded: counted[0]?.n ?? 0 }
}
