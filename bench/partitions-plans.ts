import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { quoteSchema } from '../src/store/postgres/schema-name.js'
import { buildStatements } from '../src/store/postgres/statements.js'
import { DEFAULT_LOCK_TIMEOUT_MS } from '../src/store/postgres/store.js'

/** One statement's plan on one table. */
export interface PlanCheck {
  statement: 'claim (fresh key)' | 'claim (loaded key: replay)' | 'readKey' | 'complete' | 'sweepExpired'
  table: 'plain' | 'partitioned'
  /**
   * `custom`: planned with the values bound, as an unnamed statement is. `generic`: the plan a
   * named (prepared) statement switches to after five runs, pruned at executor start-up.
   */
  plan: 'custom' | 'generic'
  /** Scoped statements name their scope; the sweep reaches every scope. */
  scoped: boolean
  /**
   * The key table's relations the statement's execution read or wrote, from the transaction's
   * own counters (`pg_stat_xact_user_tables`): scans, and rows inserted, updated, deleted.
   */
  relations: string[]
  /** The key table's relations the plan scans, after pruning (an INSERT routes its row at run time). */
  scanned: string[]
  /** The partitions (or the table) the statement's transaction holds a lock on. */
  locked: number
  /** Partitions left out of a generic plan when it started ("Subplans Removed"). */
  subplansRemoved: number
  /** EXPLAIN (ANALYZE, BUFFERS), as text. */
  text: string[]
}

export interface PlanInputs {
  scope: string
  /** A completed key of `scope` loaded into both tables. */
  loadedKey: string
  freshKey: () => string
  sweepBatch: number
  storedFingerprint: string
}

const KEY_TABLE = /^idempotency_key(_p\d+)?$/
const TOUCHED = `SELECT relname FROM pg_stat_xact_user_tables
  WHERE schemaname = $1 AND relname ~ '^idempotency_key(_p[0-9]+)?$' AND seq_scan + coalesce(idx_scan, 0) + n_tup_ins + n_tup_upd + n_tup_del > 0
  ORDER BY relname`
const LOCKED = `SELECT count(DISTINCT l.relation)::integer AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE l.pid = pg_backend_pid() AND n.nspname = $1 AND c.relkind = 'r' AND c.relname ~ '^idempotency_key(_p[0-9]+)?$'`

/**
 * EXPLAIN (ANALYZE) of every statement on a request's path and of the sweep batch, on both
 * tables, with custom and with generic plans, each in a transaction rolled back (PREPARE is not
 * transactional: its statement is deallocated by hand).
 */
export async function explainPlans(url: string, schemas: Record<PlanCheck['table'], string>, inputs: PlanInputs): Promise<PlanCheck[]> {
  const checks: PlanCheck[] = []
  for (const table of ['plain', 'partitioned'] as const) {
    const sql = buildStatements(quoteSchema(schemas[table]), undefined)
    const claimValues = (key: string, fenceToken = randomUUID()) => [inputs.scope, key, inputs.storedFingerprint, 86_400_000, randomUUID(), fenceToken, DEFAULT_LOCK_TIMEOUT_MS, null]
    const statements: { statement: PlanCheck['statement']; text: string; values: (tx: pg.Client) => Promise<unknown[]> }[] = [
      { statement: 'claim (fresh key)', text: sql.claim.text, values: async () => claimValues(inputs.freshKey()) },
      { statement: 'claim (loaded key: replay)', text: sql.claim.text, values: async () => claimValues(inputs.loadedKey) },
      { statement: 'readKey', text: sql.readKey.text, values: async () => [inputs.scope, inputs.loadedKey] },
      {
        statement: 'complete',
        text: sql.complete.text,
        // A claim of its own first, in the same transaction: the completion needs its token.
        values: async (tx) => {
          const key = inputs.freshKey()
          const fenceToken = randomUUID()
          await tx.query({ text: sql.claim.text, values: claimValues(key, fenceToken) })
          return [inputs.scope, key, fenceToken, 'completed', 201, '[]', Buffer.from('{}'), 'oncely_keys_bench']
        },
      },
      { statement: 'sweepExpired', text: sql.sweepExpired.text, values: async () => [inputs.sweepBatch] },
    ]
    for (const { statement, text, values } of statements) {
      for (const plan of ['custom', 'generic'] as const) {
        // A connection of its own: the transaction counters read below may still hold a
        // session's earlier transactions, not yet flushed (PostgreSQL 15 and later).
        const client = new pg.Client({ connectionString: url })
        await client.connect()
        await client.query('BEGIN')
        try {
          const explained = async (format: 'JSON' | 'TEXT') => {
            const bound = await values(client)
            if (plan === 'custom') return (await client.query<Record<string, unknown>>({ text: `EXPLAIN (ANALYZE, BUFFERS, FORMAT ${format}) ${text}`, values: bound })).rows
            await client.query('SET LOCAL plan_cache_mode = force_generic_plan')
            await client.query(`PREPARE bench_plan AS ${text}`)
            try {
              return (await client.query<Record<string, unknown>>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT ${format}) EXECUTE bench_plan(${bound.map((v) => literal(client, v)).join(', ')})`)).rows
            } finally {
              await client.query('DEALLOCATE bench_plan')
            }
          }
          // Twice: the first run pays for a cold cache.
          await explained('TEXT')
          const textRows = await explained('TEXT')
          const found = walk((await explained('JSON'))[0]?.['QUERY PLAN'])
          // Everything this transaction did is this statement's (and, for the completion, its
          // own claim of a key in the same scope).
          const { rows: touched } = await client.query<{ relname: string }>({ text: TOUCHED, values: [schemas[table]] })
          const { rows: locks } = await client.query<{ n: number }>({ text: LOCKED, values: [schemas[table]] })
          checks.push({
            statement,
            table,
            plan,
            scoped: statement !== 'sweepExpired',
            relations: touched.map((r) => r.relname),
            scanned: [...found.relations].sort(),
            locked: locks[0]?.n ?? 0,
            subplansRemoved: found.subplansRemoved,
            text: textRows.map((r) => String(r['QUERY PLAN'])),
          })
        } finally {
          await client.query('ROLLBACK')
          await client.end()
        }
      }
    }
  }
  return checks
}

/** A bound value as an SQL literal, for EXECUTE's arguments. */
function literal(client: pg.Client, value: unknown): string {
  if (value === null || value === undefined) return 'NULL'
  if (typeof value === 'number') return String(value)
  if (Buffer.isBuffer(value)) return `'\\x${value.toString('hex')}'::bytea`
  if (typeof value !== 'string') throw new Error(`no literal for a ${typeof value}`)
  return client.escapeLiteral(value)
}

function walk(plan: unknown): { relations: Set<string>; subplansRemoved: number } {
  const relations = new Set<string>()
  let subplansRemoved = 0
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(visit)
    if (typeof node !== 'object' || node === null) return
    for (const [name, value] of Object.entries(node)) {
      if (name === 'Relation Name' && typeof value === 'string' && KEY_TABLE.test(value)) {
        if (/Scan/.test(String((node as Record<string, unknown>)['Node Type']))) relations.add(value)
      } else if (name === 'Subplans Removed' && typeof value === 'number') subplansRemoved += value
      else visit(value)
    }
  }
  visit(plan)
  return { relations, subplansRemoved }
}

/** The plans as a markdown table: which relations each statement touched, plain and partitioned. */
export function planTable(checks: readonly PlanCheck[]): string {
  const lines = ['| statement | plan | plain: touched | partitioned: touched | partitions touched | scanned | locked | subplans removed |', '| --- | --- | --- | --- | ---: | ---: | ---: | ---: |']
  const names = (relations: readonly string[]) => (relations.length <= 2 ? relations.join(', ') : `${relations.length} partitions`)
  for (const check of checks.filter((c) => c.table === 'partitioned')) {
    const plain = checks.find((c) => c.table === 'plain' && c.statement === check.statement && c.plan === check.plan)
    lines.push(`| ${check.statement} | ${check.plan} | ${plain ? names(plain.relations) : '?'} | ${names(check.relations)} | ${check.relations.length} | ${check.scanned.length} | ${check.locked} | ${check.subplansRemoved} |`)
  }
  return lines.join('\n')
}
