import { afterAll, beforeAll, expect, it } from 'vitest'
import { OPERATIONS, partitionsBench, TABLES, type PartitionsResult } from '../../bench/partitions.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// `npm run bench -- --only partitions` (issue 24, point 6) on a few thousand rows: the bench
// still runs against today's statements (its EXPLAINs bind every parameter they take), reports
// every figure, and what it says about pruning holds: each statement that binds a scope reads
// and writes one partition, the sweep all of them. No duration is asserted (docs/conventions.md,
// "Benchmarks are not tests").

const ROWS = 3000
const PARTITIONS = 4
const ROUNDS = 2
let db: TestDatabase
let result: PartitionsResult
let schemas: { plain: string; partitioned: string }
beforeAll(async () => {
  db = await createTestDatabase()
  schemas = { plain: `${db.schema} bench plain`, partitioned: `${db.schema} bench hash` }
  result = await partitionsBench(db.url, { rows: ROWS, partitions: PARTITIONS, loops: 2, seconds: 0.2, rounds: ROUNDS, schemas, log: () => {} })
}, 180_000)
afterAll(async () => {
  await db.close()
})

it('reports each operation partitioned against plain, per round, then load time and sizes', () => {
  const latencies = OPERATIONS.flatMap((op) => (op === 'sweep batch' ? [`${op} p50`] : [`${op} p50`, `${op} p99`]))
  expect(result.figures.map((f) => f.name)).toEqual([...latencies, 'load (INSERT … SELECT)', 'VACUUM ANALYZE', 'size: heap', 'size: index', 'size: total'])
  for (const f of result.figures) {
    expect(f.baseline.name).toBe('plain')
    expect(f.runs).toHaveLength(latencies.includes(f.name) ? ROUNDS : 1)
    for (const value of [...f.runs, f.baseline.value, f.ratio]) expect(Number.isFinite(value) && value > 0, `${f.name}: ${value}`).toBe(true)
  }
})

it('loaded every row into each table, and the measured sweep batches found expired rows to delete', () => {
  expect(result.sizes.plain).toMatchObject({ relations: 1, rowsLoaded: ROWS })
  expect(result.sizes.partitioned).toMatchObject({ relations: PARTITIONS, rowsLoaded: ROWS })
  expect(result.load.expired).toBe(ROWS / 10)
  for (const table of TABLES) expect(result.swept[table]).toBe(ROUNDS * 5 * result.sweepBatch)
})

it('counts the same round trips per operation on both tables: partitioning changes no statement', () => {
  for (const op of OPERATIONS) {
    const { plain, partitioned } = result.roundTrips[op]
    expect(Number.isInteger(plain) && plain >= 1).toBe(true)
    expect(partitioned).toBe(plain)
  }
})

it('each statement with its scope bound touches one partition, the same one, in custom and generic plans; the sweep touches all', () => {
  const partitioned = result.plans.filter((p) => p.table === 'partitioned')
  const scoped = partitioned.filter((p) => p.scoped)
  expect(new Set(scoped.map((p) => p.statement))).toEqual(new Set(['claim (fresh key)', 'claim (loaded key: replay)', 'readKey', 'complete']))
  expect(new Set(scoped.map((p) => p.plan))).toEqual(new Set(['custom', 'generic']))
  const home = scoped[0]?.relations[0]
  expect(home).toMatch(/^idempotency_key_p[0-3]$/)
  for (const check of scoped) {
    expect({ statement: check.statement, plan: check.plan, relations: check.relations, scanned: check.scanned }).toEqual({ statement: check.statement, plan: check.plan, relations: [home], scanned: [home] })
    // A custom plan locks only that partition; a generic plan prunes the others when it starts.
    if (check.plan === 'custom') expect(check.locked).toBe(1)
    else expect(check.subplansRemoved).toBe(PARTITIONS - 1)
  }
  const everyPartition = Array.from({ length: PARTITIONS }, (_, i) => `idempotency_key_p${i}`)
  for (const sweep of partitioned.filter((p) => !p.scoped)) expect(sweep.relations).toEqual(everyPartition)
  for (const plain of result.plans.filter((p) => p.table === 'plain')) expect(plain.relations).toEqual(['idempotency_key'])
})

it('drops both schemas it created', async () => {
  const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::integer AS n FROM pg_namespace WHERE nspname = ANY($1)', [Object.values(schemas)])
  expect(rows[0]?.n).toBe(0)
})
