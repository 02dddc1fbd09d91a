import { readdir, readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

// Issue 24, point 6 (docs/scale-out.md): every statement of the store can be routed to one shard
// by its scope, so the tables can be distributed by `scope` (Citus) or hash-partitioned by it.
// Every statement of every src/store/postgres/statements*.ts module (found by listing the
// folder, so a new module is read too) and the reference service's business statements must
// filter by `scope = $n` at the top level of a WHERE, or insert `scope` from a bound value.
// The few that are cross-scope by nature are listed below with their reason: a new statement
// that forgets the scope fails here.

const storeFolder = fileURLToPath(new URL('../../src/store/postgres/', import.meta.url))
const migrationsFolder = fileURLToPath(new URL('../../src/store/postgres/migrations/', import.meta.url))

/** Statements that legitimately reach every scope, each with why. */
const CROSS_SCOPE: Record<string, string> = {
  ...each(['statements.sweepExpired'], "the sweeper's batch by expires_at: a maintenance scan of every scope, run on each shard"),
  ...each(['statements.countStaleClaims', 'statements.countClaimsOlderThan'], "the metrics' gauges count every scope"),
  ...each(['statements.begin'], 'transaction control, not a statement on a table'),
  ...each(
    ['statements.claimBatch', 'statements.completeBatch', 'statements.commitStepBatch', 'statements.markStepStartedBatch'],
    'claims, completions or step writes of any scopes that arrived together, in one statement; maxBatchSize: 1 sends each alone, routed',
  ),
  ...each(['ops.listKeys'], 'the ops listing: the user is optional ($2 NULL lists every scope)'),
  ...each(['ops.stats', 'ops.runningClaims'], 'the ops totals count every scope'),
  ...each(['ops.reconcilable'], "the reconciler's search for abandoned claims, across scopes; each take-over that follows is scoped"),
  ...each(
    [
      'outbox.enqueue',
      'outbox.enqueueAndNotify',
      'outbox.markSent',
      'outbox.markFailed',
      'outbox.releaseLeases',
      'outbox.retryDead',
      'outbox.inboxInsert',
    ],
    'the outbox and inbox have no scope column (migration 003): routed by event id, see docs/scale-out.md',
  ),
  ...each(['outbox.claimHeads', 'outbox.claimFollowers'], "the relay's claim: every due event, whoever wrote it"),
  ...each(['outbox.listByStatus', 'outbox.retryAllDead', 'outbox.deadBefore', 'outbox.backlog'], 'outbox operations over every event'),
  ...each(['outbox.pruneSent', 'outbox.inboxPrune'], 'retention pruning by age, every event'),
  ...each(['outbox.savepoint', 'outbox.releaseSavepoint'], 'transaction control, not a statement on a table'),
  ...each(['outbox.LOCK_ORDERING_KEYS'], "advisory locks of a shared transaction's events' ordering keys, taken first: no table"),
  ...each(['listen.listen', 'listen.unlisten'], 'the relay wake-up channel, one per schema'),
  ...each(
    [
      'migrate.LOCK_MIGRATIONS',
      'migrate.SET_LOCK_TIMEOUT',
      'migrate.CREATE_SCHEMA',
      'migrate.CREATE_MIGRATIONS_TABLE',
      'migrate.ADD_MIGRATIONS_BREAKING',
      'migrate.SELECT_APPLIED_MIGRATIONS',
      'migrate.SELECT_APPLIED_MIGRATIONS_WITHOUT_BREAKING',
      'migrate.INSERT_APPLIED_MIGRATION',
      'migrate.TABLE_EXISTS',
      'migrate.KEY_TABLE_LAYOUT',
      'migrate.CREATE_KEY_TABLE_PARTITIONS',
    ],
    'schema management: DDL and the migrations table, on the coordinator',
  ),
  ...each(
    ['catalog.SCHEMA_COLUMNS', 'catalog.SCHEMA_INDEXES', 'catalog.SCHEMA_CONSTRAINTS', 'catalog.APPLIED_MIGRATIONS', 'catalog.SCHEMA_EXISTS'],
    "doctor's catalog reads",
  ),
  ...each(['databases.SHOW_SERVER_VERSION', 'databases.create', 'databases.drop'], "oncely race's whole databases"),
  ...each(
    ['clientKeys.setup', 'clientKeys.setupTakingTurns', 'clientKeys.insert', 'clientKeys.select', 'clientKeys.finish', 'clientKeys.prune'],
    "the client's own key table, keyed by operation id: a client-side table with no scope",
  ),
}

/** Exports of the statements modules that are not statements. */
const NOT_STATEMENTS = new Set(['outbox.outboxChannel', 'outbox.bind', 'ops.statsTableName'])

function each(names: string[], reason: string): Record<string, string> {
  return Object.fromEntries(names.map((name) => [name, reason]))
}

/** The module's short name: `statements-ops.ts` is `ops`, `statements.ts` is `statements`. */
function moduleName(file: string): string {
  const base = file.replace(/\.ts$/, '')
  if (base === 'statements') return 'statements'
  return base.replace(/^statements-/, '').replace(/-(\w)/g, (_, c: string) => c.toUpperCase())
}

const SCHEMA = '"some schema"'

/** Every statement's text by `module.name`: what each build function returns, each constant, each schema-taking constant function. */
async function allStatements(): Promise<Map<string, string>> {
  const found = new Map<string, string>()
  const files = (await readdir(storeFolder)).filter((file) => /^statements[^/]*\.ts$/.test(file)).sort()
  for (const file of files) {
    const module = (await import(new URL(file, `file://${storeFolder}`).href)) as Record<string, unknown>
    const area = moduleName(file)
    for (const [exported, value] of Object.entries(module)) {
      const qualified = `${area}.${exported}`
      if (NOT_STATEMENTS.has(qualified)) continue
      if (typeof value === 'string') found.set(qualified, value)
      else if (typeof value === 'function' && /^build/.test(exported)) {
        const built = (value as (...args: unknown[]) => Record<string, unknown>)(SCHEMA, '"t"', '"i"')
        // buildListenStatements and buildDatabaseStatements are named for what they build.
        const prefix = exported === 'buildListenStatements' ? 'listen' : exported === 'buildDatabaseStatements' ? 'databases' : area
        for (const [name, statement] of Object.entries(built)) found.set(`${prefix}.${name}`, textOf(statement))
      } else if (typeof value === 'function' && /^[A-Z_]+$/.test(exported)) found.set(qualified, textOf((value as (schema: string) => unknown)(SCHEMA)))
      else throw new Error(`${qualified} is neither a statement nor listed in NOT_STATEMENTS`)
    }
  }
  return found
}

function textOf(statement: unknown): string {
  if (typeof statement === 'string') return statement
  if (typeof statement === 'function') return String((statement as (a: number, b: number) => unknown)(1000, 500))
  if (typeof statement === 'object' && statement !== null && typeof (statement as { text?: unknown }).text === 'string') return (statement as { text: string }).text
  throw new Error(`not a statement: ${JSON.stringify(statement)}`)
}

/**
 * Routed by its scope: `scope = $n` as a conjunct of a WHERE (after WHERE or AND, not inside an
 * OR), or an INSERT whose `scope` column takes a bound value. `column` names the scope's column:
 * `scope` in oncely's key table, `user_id` in the reference service's own tables.
 */
function routedByScope(text: string, column = 'scope'): boolean {
  const sql = text.replace(/\s+/g, ' ')
  if (new RegExp(`\\b(?:WHERE|AND) (?:\\w+\\.)?${column} = \\$\\d+\\b`, 'i').test(sql)) return true
  const insert = /INSERT INTO \S+(?: AS \w+)? \(([^)]*)\) (?:VALUES \(|SELECT )([^)]*?)(?:\)|\bFROM\b|\bWHERE\b|$)/i.exec(sql)
  if (insert === null) return false
  const columns = insert[1]!.split(',').map((column) => column.trim())
  const values = insert[2]!.split(',').map((value) => value.trim())
  const at = columns.indexOf(column)
  return at >= 0 && /^\$\d+$/.test(values[at] ?? '')
}

describe('every statement is routable by scope (issue 24, point 6)', () => {
  it('each store statement filters scope = $n, or is listed as cross-scope with its reason', async () => {
    const statements = await allStatements()
    // The modules were read: the claim, the sweeper and an outbox statement are among them.
    expect([...statements.keys()]).toEqual(expect.arrayContaining(['statements.claim', 'statements.sweepExpired', 'outbox.claimHeads', 'ops.inspectKey']))
    const unrouted = [...statements].filter(([name, text]) => !routedByScope(text) && CROSS_SCOPE[name] === undefined).map(([name]) => name)
    expect(unrouted).toEqual([])
  })

  it('the cross-scope list names only statements that exist and are not routed (it cannot go stale)', async () => {
    const statements = await allStatements()
    const stale = Object.keys(CROSS_SCOPE).filter((name) => {
      const text = statements.get(name)
      return text === undefined || routedByScope(text)
    })
    expect(stale).toEqual([])
  })

  it("the reference service's business statements are routed by the charge's user", async () => {
    const sql = await import('../../src/reference-service/sql.js')
    expect(routedByScope(sql.INSERT_CHARGE, 'user_id')).toBe(true)
    expect(routedByScope(sql.SELECT_CHARGE, 'user_id')).toBe(true)
  })

  it('tells routed from unrouted text', () => {
    expect(routedByScope('SELECT 1 FROM t WHERE scope = $1 AND key = $2')).toBe(true)
    expect(routedByScope('SELECT 1 FROM t k WHERE k.key = $2 AND k.scope = $1')).toBe(true)
    expect(routedByScope('SELECT 1 FROM t WHERE ($2::text IS NULL OR scope = $2)')).toBe(false)
    expect(routedByScope('SELECT 1 FROM t WHERE key = $1')).toBe(false)
    expect(routedByScope("SELECT 1 FROM t WHERE scope = 'x'")).toBe(false)
    expect(routedByScope('INSERT INTO t (id, scope) VALUES ($1, $2)')).toBe(true)
    expect(routedByScope("INSERT INTO t (id, scope) VALUES ($1, 'x')")).toBe(false)
    expect(routedByScope('INSERT INTO t AS k (scope, key) SELECT $1, $2 WHERE true')).toBe(true)
  })

  it('no statement leaves session state behind, so a transaction-mode pooler may hand each transaction another server connection', async () => {
    const statements = await allStatements()
    const sessionState = [
      /\bpg_(?:try_)?advisory_lock(?:_shared)?\s*\(/i, // session advisory locks: only the _xact_ ones end with the transaction
      /\bset_config\s*\([^)]*,\s*false\s*\)/i,
      /(?:^|;)\s*SET\s+(?!LOCAL\b)(?:SESSION\s+)?\w+\s*(?:=|TO\b)/i,
      /\bPREPARE\s+\w+/i,
      /\bWITH\s+HOLD\b/i,
      /\bCREATE\s+TEMP(?:ORARY)?\b/i,
    ]
    const offenders = [...statements].filter(([, text]) => sessionState.some((pattern) => pattern.test(text))).map(([name]) => name)
    expect(offenders).toEqual([])
    // LISTEN is session state too: only the relay's own wake-up connection sends it, and `listen: false` turns it off.
    expect([...statements].filter(([, text]) => /^\s*LISTEN\b/i.test(text)).map(([name]) => name)).toEqual(['listen.listen'])
    // The patterns match what they are meant to.
    expect(sessionState.map((pattern) => pattern.test("SELECT pg_advisory_lock(1); SET search_path = x; SELECT set_config('a', 'b', false)"))).toEqual([true, true, true, false, false, false])
    expect(sessionState.some((pattern) => pattern.test('BEGIN; SET LOCAL statement_timeout = 5; SELECT pg_advisory_xact_lock(1)'))).toBe(false)
  })

  it('every table of the migrations that has a scope column leads its primary key with it (co-location by scope)', async () => {
    const files = (await readdir(migrationsFolder)).filter((file) => file.endsWith('.sql')).sort()
    const ddl = (await Promise.all(files.map((file) => readFile(`${migrationsFolder}${file}`, 'utf8')))).join('\n')
    const tables = [...ddl.matchAll(/CREATE TABLE (\S+) \(([\s\S]*?)\n\);/g)]
    expect(tables.length).toBeGreaterThan(0)
    // Created `user_id`, the scope's column until migration 007 renamed it `scope`.
    const scoped = tables.filter(([, , body]) => /^\s*user_id\s/m.test(body!))
    expect(scoped.map(([, name]) => name)).toContain('{{schema}}.idempotency_key')
    for (const [, name, body] of scoped) expect({ name, primaryKey: /PRIMARY KEY \((\w+)/.exec(body!)?.[1] }).toEqual({ name, primaryKey: 'user_id' })
  })
})
