import { randomBytes } from 'node:crypto'
import type { PoolLike, Queryable } from './executor.js'
import { withTransaction } from './statement-runner.js'
import { loadMigrations } from './migrate.js'
import { isPartitionCount, isScopePartitionKey, PARTITION_KEY, readKeyTableLayout } from './partitions.js'
import { DEFAULT_SCHEMA, quoteSchema } from './schema-name.js'
import {
  APPLIED_MIGRATIONS,
  SCHEMA_COLUMNS,
  SCHEMA_CONSTRAINTS,
  SCHEMA_EXISTS,
  SCHEMA_INDEXES,
  type ColumnRow,
  type ConstraintRow,
  type IndexRow,
} from './statements-catalog.js'
import { CREATE_MIGRATIONS_TABLE, CREATE_SCHEMA } from './statements-migrate.js'

/** One difference between the live schema and the one this version of oncely expects. */
export interface SchemaProblem {
  kind: 'missing-schema' | 'pending-migration' | 'unknown-migration' | 'missing' | 'unexpected' | 'different'
  detail: string
}

export interface SchemaReport {
  schema: string
  ok: boolean
  problems: SchemaProblem[]
}

/**
 * Compares the live schema with the expected one: the shipped migrations are applied to a
 * scratch schema inside a transaction that is always rolled back, and the two catalogs are
 * compared (columns, indexes, constraints), so the expectation can never drift from the
 * migrations themselves. A key table `migrate({ partitions })` created is expected with as many
 * hash partitions as it has, each with the parent's columns, indexes and constraints.
 *
 * @example
 * ```ts
 * import { checkSchema } from 'oncely/postgres'
 * const report = await checkSchema({ pool })
 * for (const problem of report.problems) console.error(problem.detail)
 * ```
 */
export async function checkSchema(options: { pool: PoolLike; schema?: string }): Promise<SchemaReport> {
  const schema = options.schema ?? DEFAULT_SCHEMA
  const quoted = quoteSchema(schema)
  const problems: SchemaProblem[] = []
  const exists = await options.pool.query({ text: SCHEMA_EXISTS, values: [schema] })
  if ((exists.rowCount ?? 0) === 0) {
    return { schema, ok: false, problems: [{ kind: 'missing-schema', detail: `schema ${quoted} does not exist: run oncely migrate` }] }
  }
  const shipped = await loadMigrations(schema)
  const applied = await options.pool
    .query<{ id: number; name: string }>({ text: APPLIED_MIGRATIONS(quoted) })
    .then((result) => result.rows)
    .catch(() => [])
  const appliedIds = new Set(applied.map((row) => row.id))
  const shippedIds = new Set(shipped.map((migration) => migration.id))
  for (const migration of shipped) {
    if (!appliedIds.has(migration.id)) problems.push({ kind: 'pending-migration', detail: `migration ${migration.name} is not applied: run oncely migrate` })
  }
  for (const row of applied) {
    if (!shippedIds.has(row.id)) problems.push({ kind: 'unknown-migration', detail: `migration ${row.name} was applied by a newer oncely` })
  }

  const live = await catalog(options.pool, schema)
  const layout = await readKeyTableLayout(options.pool, schema)
  if (layout.kind === 'partitioned' && !isScopePartitionKey(layout.partitionKey)) {
    problems.push({ kind: 'different', detail: `table idempotency_key is partitioned by ${layout.partitionKey}, expected ${PARTITION_KEY} or not partitioned` })
  }
  const scratch = `oncely_doctor_${randomBytes(6).toString('hex')}`
  // Partitioned with no partition yet (created by hand): expected plain, so each difference is listed.
  const partitions = layout.kind === 'partitioned' && isPartitionCount(layout.partitions) ? layout.partitions : undefined
  const expected = await expectedCatalog(options.pool, scratch, partitions)
  compare(problems, 'column', live.columns, expected.columns, (row) => `${row.table_name}.${row.column_name}`, (row) => `${row.data_type} ${row.is_nullable === 'YES' ? 'null' : 'not null'} default ${row.column_default ?? 'none'}`)
  compare(problems, 'index', live.indexes, expected.indexes, (row) => `${row.table_name}: ${row.index_name}`, (row) => row.definition)
  compare(problems, 'constraint', live.constraints, expected.constraints, (row) => `${row.table_name}: ${row.constraint_name}`, (row) => row.definition)
  return { schema, ok: problems.length === 0, problems }
}

interface Catalog {
  columns: ColumnRow[]
  indexes: IndexRow[]
  constraints: ConstraintRow[]
}

async function catalog(db: Queryable, schema: string): Promise<Catalog> {
  const [columns, indexes, constraints] = [
    (await db.query<ColumnRow>({ text: SCHEMA_COLUMNS, values: [schema] })).rows,
    (await db.query<IndexRow>({ text: SCHEMA_INDEXES, values: [schema] })).rows,
    (await db.query<ConstraintRow>({ text: SCHEMA_CONSTRAINTS, values: [schema] })).rows,
  ]
  return { columns, indexes, constraints }
}

class RollBack extends Error {}

async function expectedCatalog(pool: PoolLike, scratch: string, partitions: number | undefined): Promise<Catalog> {
  let expected: Catalog | undefined
  await withTransaction(pool, async (tx) => {
    // The same statements migrate() runs, so the expected migrations table is the real one.
    await tx.query({ text: CREATE_SCHEMA(quoteSchema(scratch)) })
    await tx.query({ text: CREATE_MIGRATIONS_TABLE(quoteSchema(scratch)) })
    for (const migration of await loadMigrations(scratch, { partitions })) await tx.query({ text: migration.sql })
    expected = await catalog(tx, scratch)
    throw new RollBack()
  }).catch((error: unknown) => {
    if (!(error instanceof RollBack)) throw error
  })
  if (!expected) throw new Error('the expected schema could not be built')
  return expected
}

function compare<T>(problems: SchemaProblem[], what: string, live: T[], expected: T[], name: (row: T) => string, shape: (row: T) => string): void {
  const liveByName = new Map(live.map((row) => [name(row), shape(row)]))
  const expectedByName = new Map(expected.map((row) => [name(row), shape(row)]))
  for (const [key, want] of expectedByName) {
    const have = liveByName.get(key)
    if (have === undefined) problems.push({ kind: 'missing', detail: `${what} ${key} is missing (expected ${want})` })
    else if (have !== want) problems.push({ kind: 'different', detail: `${what} ${key} is ${have}, expected ${want}` })
  }
  for (const [key, have] of liveByName) {
    if (!expectedByName.has(key)) problems.push({ kind: 'unexpected', detail: `${what} ${key} is not part of oncely's schema (${have})` })
  }
}
