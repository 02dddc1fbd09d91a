import pg from 'pg'
import { createEngine, fingerprintRequest, sweepExpiredKeys, type Engine, type StoredResponse } from '../src/index.js'
import { createPostgresStore, migrate, type Queryable } from '../src/store/postgres/index.js'
import { closedLoop, interleaved } from './closed-loop.js'
import { figure, type Figure } from './report.js'
import { median, percentile } from './stats.js'

const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_1","amount":1000}') }
const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
const BATCH_ROWS = 500_000

/**
 * Scale (issue 11, benchmark 4; behind `--scale`): claim and replay latency on a table of
 * `rows` keys against an empty one, measured interleaved on two schemas of one database; then
 * the sweeper deleting the expired tenth of those rows in batches while claims run, the claims'
 * p99 during the sweep against without it.
 */
export async function scaleBench(url: string, options: { rows: number; connections: number; seconds: number }): Promise<Figure[]> {
  const pool = new pg.Pool({ connectionString: url, max: options.connections + 2 })
  try {
    const engines: Record<'empty' | 'full', Engine<Queryable>> = { empty: await engineOn(pool, 'bench_scale_empty'), full: await engineOn(pool, 'bench_scale_full') }
    const expired = Math.floor(options.rows / 10)
    const started = performance.now()
    for (let from = 0; from < options.rows; from += BATCH_ROWS) {
      await generate(pool, 'bench_scale_full', from, Math.min(options.rows, from + BATCH_ROWS), expired)
      process.stderr.write(`scale: ${Math.min(options.rows, from + BATCH_ROWS)} of ${options.rows} rows generated\n`)
    }
    await pool.query('VACUUM ANALYZE bench_scale_full.idempotency_key')
    // Gigabytes just written: flush them now, not under the first claims measured (or timed out).
    await pool.query('CHECKPOINT')
    const size = (await pool.query<{ size: string }>(`SELECT pg_size_pretty(pg_total_relation_size('bench_scale_full.idempotency_key')) AS size`)).rows[0]?.size
    process.stderr.write(`scale: ${options.rows} rows (${size}) in ${((performance.now() - started) / 1000).toFixed(0)} s\n`)
    for (const engine of Object.values(engines)) await prepareKeys(engine)

    const latencies: Record<string, number[][]> = {}
    const variants = ['empty claim', 'full claim', 'empty replay', 'full replay'] as const
    await interleaved(3, variants, async (variant, round) => {
      const [table, kind] = variant.split(' ') as ['empty' | 'full', 'claim' | 'replay']
      const engine = engines[table]
      const run = await closedLoop(options.connections, options.seconds, async (i) => {
        const decision = await engine.begin({ scope: 'bench', key: kind === 'claim' ? `claim-${round}-${i}` : 'done', fingerprint })
        if (decision.kind !== (kind === 'claim' ? 'execute' : 'replay')) throw new Error(`${variant}: ${decision.kind}`)
      })
      ;(latencies[variant] ??= []).push(run.latencies)
    })
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
            },
            median(at(`full ${kind}`)),
          ),
        )
      }
    }

    // The sweep: claims on the full table without a sweep, then while the sweeper deletes the
    // expired rows in batches, then without again.
    const store = createPostgresStore({ pool, schema: 'bench_scale_full' })
    const claims = async (label: string) =>
      (await closedLoop(options.connections, options.seconds, async (i) => void (await engines.full.begin({ scope: 'bench', key: `${label}-${i}`, fingerprint })))).latencies
    const before = await claims('before-sweep')
    let sweeping = true
    const sweepStarted = performance.now()
    const sweep = sweepExpiredKeys(store, { batchSize: 1000, maxBatches: 1_000_000 }).finally(() => (sweeping = false))
    const during: number[] = []
    for (let round = 0; sweeping; round++) during.push(...(await claims(`during-sweep-${round}`)))
    const { deleted } = await sweep
    const sweepSeconds = (performance.now() - sweepStarted) / 1000
    const after = await claims('after-sweep')
    figures.push(
      figure(
        {
          section: 'scale',
          name: `claim p99 while the sweeper deletes ${deleted} expired rows in batches of 1000 (${sweepSeconds.toFixed(0)} s)`,
          unit: 'ms',
          runs: [percentile(during, 99)],
          baseline: { name: 'no sweep (before and after)', value: percentile([...before, ...after], 99) },
          target: { compare: '<=', ratio: 2 },
          extra: { 'p50 ms': percentile(during, 50), 'baseline p50 ms': percentile([...before, ...after], 50) },
        },
        percentile(during, 99),
      ),
    )
    return figures
  } finally {
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

/**
 * Rows `from` to `to` of the generated table: completed keys spread over 100 000 users, the
 * first `expired` of them past their expiry (what the sweeper deletes).
 */
async function generate(pool: pg.Pool, schema: string, from: number, to: number, expired: number): Promise<void> {
  await pool.query({
    text: `INSERT INTO ${schema}.idempotency_key
             (user_id, key, request_hash, status, claim_id, response_status, response_headers, response_body, created_at, updated_at, expires_at)
           SELECT 'u' || (i % 100000), 'key-' || i, md5(i::text) || md5((i + 1)::text), 'completed', gen_random_uuid(), 201,
                  '[["content-type","application/json"]]'::jsonb, convert_to('{"id":"ch_' || i || '","amount":1000}', 'UTF8'),
                  now() - interval '2 days', now() - interval '2 days',
                  CASE WHEN i < $3 THEN now() - interval '1 hour' ELSE now() + interval '1 day' END
             FROM generate_series($1::bigint, $2::bigint - 1) AS i`,
    values: [from, to, expired],
  })
}
