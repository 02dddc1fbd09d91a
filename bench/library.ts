import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { createEngine, fingerprintRequest, type StoredResponse } from '../src/index.js'
import { createPostgresStore, migrate, type Queryable } from '../src/store/postgres/index.js'
import { DEFAULT_LOCK_TIMEOUT_MS } from '../src/store/postgres/store.js'
import { quoteSchema } from '../src/store/postgres/schema-name.js'
import { buildStatements, type ClaimRow, type Statement } from '../src/store/postgres/statements.js'
import { closedLoop, interleaved } from './closed-loop.js'
import { figure, type Figure } from './report.js'
import { median } from './stats.js'

const SCHEMA = 'bench_library'
const response: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: Buffer.from('{"id":"ch_1","amount":1000}') }

const VARIANTS = ['raw fresh', 'engine fresh', 'raw replay', 'engine replay', 'raw conflict', 'engine conflict'] as const
type Variant = (typeof VARIANTS)[number]

/**
 * Library level (issue 11, benchmark 1): the engine's fresh, replay and conflict per second at
 * `concurrency`, against a raw `pg` loop sending the same statements (the store's own SQL,
 * prepared the same way) from the same process and the same pool. The ratio is what the engine
 * and store add over the database's own cost; the CPU columns are this process's CPU time per
 * operation (the engine and pg against pg alone), the same measure as the peers' API CPU-ms/req.
 */
export async function libraryBench(url: string, options: { concurrency: number; seconds: number; rounds: number; warmUpSeconds?: number; schema?: string }): Promise<Figure[]> {
  const pool = new pg.Pool({ connectionString: url, max: options.concurrency })
  const schema = options.schema ?? SCHEMA
  try {
    await migrate({ pool, schema })
    const engine = createEngine<Queryable>({ store: createPostgresStore({ pool, schema }) })
    const sql = buildStatements(quoteSchema(schema), 'bench_raw')
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
    const ttlMs = engine.options.ttlMs
    // The values the store binds: the claim's identity and token are minted by the caller; no
    // stale threshold is recorded, and the completion's wake-up channel is one nobody listens on.
    const claim = (key: string, token = randomUUID()) => pool.query<ClaimRow>(bind(sql.claim, ['u', key, fingerprint, ttlMs, randomUUID(), token, DEFAULT_LOCK_TIMEOUT_MS, null]))

    const done = await engine.begin({ scope: 'u', key: 'done', fingerprint })
    if (done.kind === 'execute') await done.execution.complete(response)
    const running = await engine.begin({ scope: 'u', key: 'running', fingerprint })

    const ops: Record<Variant, (i: number, round: number) => Promise<void>> = {
      'raw fresh': async (i, round) => {
        const token = randomUUID()
        const row = (await claim(`raw-${round}-${i}`, token)).rows[0]
        if (row?.outcome !== 'claimed') throw new Error('a fresh key was not claimed')
        const body = Buffer.from(response.body)
        await pool.query(bind(sql.complete, ['u', `raw-${round}-${i}`, token, 'completed', response.status, JSON.stringify(response.headers), body, 'bench_raw_keys']))
      },
      'engine fresh': async (i, round) => {
        const decision = await engine.begin({ scope: 'u', key: `engine-${round}-${i}`, fingerprint })
        if (decision.kind !== 'execute') throw new Error(`fresh key answered ${decision.kind}`)
        await decision.execution.complete(response)
      },
      'raw replay': async () => void (await claim('done')),
      'engine replay': async () => expectKind(await engine.begin({ scope: 'u', key: 'done', fingerprint }), 'replay'),
      'raw conflict': async () => void (await claim('running')),
      'engine conflict': async () => expectKind(await engine.begin({ scope: 'u', key: 'running', fingerprint }), 'conflict'),
    }
    // Warm-up: every connection of the pool opened and every statement prepared on it.
    for (const variant of VARIANTS) await closedLoop(options.concurrency, options.warmUpSeconds ?? 0.5, (i) => ops[variant](i, -1))

    const runs = Object.fromEntries(VARIANTS.map((v) => [v, [] as number[]])) as Record<Variant, number[]>
    const cpuMs = Object.fromEntries(VARIANTS.map((v) => [v, [] as number[]])) as Record<Variant, number[]>
    await interleaved(options.rounds, VARIANTS, async (variant, round) => {
      const { perSecond, cpuMsPerOp } = await closedLoop(options.concurrency, options.seconds, (i) => ops[variant](i, round))
      runs[variant].push(perSecond)
      cpuMs[variant].push(cpuMsPerOp)
    })
    if (running.kind === 'execute') await running.execution.release()

    const section = `library, concurrency ${options.concurrency}`
    return (['fresh', 'replay', 'conflict'] as const).map((kind) =>
      figure(
        {
          section,
          name: `engine ${kind}`,
          unit: 'op/s',
          runs: runs[`engine ${kind}`],
          baseline: { name: `raw pg ${kind}`, value: median(runs[`raw ${kind}`]) },
          ...(kind === 'conflict' ? {} : { target: { compare: '>=' as const, ratio: 0.6 } }),
          extra: {
            'baseline runs': runs[`raw ${kind}`].map((r) => r.toFixed(0)).join(' '),
            'CPU-ms/op': median(cpuMs[`engine ${kind}`]).toFixed(3),
            'baseline CPU-ms/op': median(cpuMs[`raw ${kind}`]).toFixed(3),
          },
        },
        median(runs[`engine ${kind}`]),
      ),
    )
  } finally {
    await pool.end()
  }
}

function bind(statement: Statement, values: unknown[]) {
  return statement.name === undefined ? { text: statement.text, values } : { name: statement.name, text: statement.text, values }
}

function expectKind(decision: { kind: string }, kind: string): void {
  if (decision.kind !== kind) throw new Error(`expected ${kind}, the engine answered ${decision.kind}`)
}
