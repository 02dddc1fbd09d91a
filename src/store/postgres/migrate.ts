import { OncelyError } from '../../errors.js'
import { describeKind, invalid, invalidHidden, positiveInteger } from '../../option-validation.js'
import type { PoolLike, Queryable } from './executor.js'
import { withTransaction } from './statement-runner.js'
import { MIGRATION_FILES } from './migration-files.js'
import { KEY_TABLE_MIGRATION, partitionKeyTable, readKeyTableLayout, refuseRepartitioning, resolvePartitions } from './partitions.js'
import { SQLSTATE, sqlState } from './pg-errors.js'
import { DEFAULT_SCHEMA, quoteSchema } from './schema-name.js'
import {
  ADD_MIGRATIONS_BREAKING,
  CREATE_MIGRATIONS_TABLE,
  CREATE_SCHEMA,
  INSERT_APPLIED_MIGRATION,
  LOCK_MIGRATIONS,
  SELECT_APPLIED_MIGRATIONS,
  SELECT_APPLIED_MIGRATIONS_WITHOUT_BREAKING,
  SET_LOCK_TIMEOUT,
  TABLE_EXISTS,
  type AppliedMigrationRow,
} from './statements-migrate.js'

/** One numbered `.sql` file. */
export interface Migration {
  id: number
  name: string
  sql: string
  /** The file has a `-- oncely:breaking` line: older versions of oncely must not run on the schema after it. */
  breaking: boolean
}

export interface MigrateOptions {
  /** A `pg`-shaped pool (see `PoolLike`). (Default: none; required) */
  pool: PoolLike
  /** Schema to create the tables in. (Default: `oncely`) */
  schema?: string
  /** How long one attempt waits for a lock (the migration lock, or a table a migration alters) before it rolls back and tries again. (Default: 2000) */
  lockTimeoutMs?: number
  /** How long `migrate` keeps trying before it throws `ONCELY_MIGRATION_LOCKED`. (Default: 60000) */
  timeoutMs?: number
  /**
   * Creates the key table `PARTITION BY HASH (scope)` into this many partitions (2 to 1024), when
   * this call creates the schema. On a schema partitioned the same way, a no-op; on one that is not
   * partitioned, or is partitioned differently, `ONCELY_MIGRATION_FAILED` and nothing changes
   * (docs/scale-out.md, "Hash partitions by scope"). (Default: none; a plain table)
   */
  partitions?: number | undefined
}

export interface MigrateResult {
  /** Migrations this call applied, in order; empty when the schema was already current. */
  applied: Migration[]
  /** Additive migrations a newer oncely applied, which this version does not know and runs alongside. */
  newer: Array<{ id: number; name: string }>
}

const BREAKING_MARK = /^--\s*oncely:breaking\s*$/m

/** The shipped migrations, ordered by number, with the schema filled in (and the key table partitioned, given `partitions`). */
export async function loadMigrations(schema: string = DEFAULT_SCHEMA, options: { partitions?: number | undefined } = {}): Promise<Migration[]> {
  const quoted = quoteSchema(schema)
  const partitions = resolvePartitions(options.partitions)
  return Promise.resolve(
    MIGRATION_FILES.map((file) => {
      const id = Number.parseInt(file.name, 10)
      // A function, not a string: a replacement string reads `$&`, `$$` and the like in the name as patterns.
      const sql = file.sql.replaceAll('{{schema}}', () => quoted)
      return { id, name: file.name, sql: partitions !== undefined && id === KEY_TABLE_MIGRATION ? partitionKeyTable(sql, quoted, partitions) : sql, breaking: BREAKING_MARK.test(file.sql) }
    }),
  )
}

/**
 * Applies the schema: each migration in its own transaction, under a transaction-scoped advisory
 * lock, so twenty processes migrating at once end with one schema and no error
 * (docs/conventions.md, "Migrations"). Every lock wait is bounded by `lockTimeoutMs`, and an attempt
 * that times out is retried until `timeoutMs`: a stuck migrator, or a long transaction holding a
 * table a migration alters, delays a start instead of hanging it (and queueing every request
 * behind the waiting DDL). Safe to run again: applied migrations are skipped. Migrations applied
 * by a newer oncely are allowed when additive and stop this one when breaking
 * (`ONCELY_SCHEMA_TOO_NEW`).
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { migrate } from 'oncely/postgres'
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * const { applied } = await migrate({ pool })
 * console.log(`applied ${applied.length} migrations`)
 * ```
 */
export async function migrate(options: MigrateOptions): Promise<MigrateResult> {
  const resolved = resolveMigrateOptions(options)
  const { pool, schema, quoted, partitions } = resolved
  const migrations = await loadMigrations(schema, { partitions })
  const known = new Set(migrations.map((migration) => migration.id))
  const applied: Migration[] = []
  let newer: AppliedMigrationRow[] = []
  const deadline = Date.now() + resolved.timeoutMs
  for (const migration of migrations) {
    await retryWhileLocked(deadline, resolved.timeoutMs, () =>
      withTransaction(pool, async (tx) => {
        await tx.query({ text: SET_LOCK_TIMEOUT, values: [String(resolved.lockTimeoutMs)] })
        await tx.query({ text: LOCK_MIGRATIONS, values: [schema] })
        await tx.query({ text: CREATE_SCHEMA(quoted) })
        await tx.query({ text: CREATE_MIGRATIONS_TABLE(quoted) })
        await tx.query({ text: ADD_MIGRATIONS_BREAKING(quoted) })
        const { rows } = await tx.query<AppliedMigrationRow>({ text: SELECT_APPLIED_MIGRATIONS(quoted) })
        newer = rows.filter((row) => !known.has(row.id))
        refuseBreaking(quoted, newer)
        const done = rows.some((row) => row.id === migration.id)
        // Under the lock, so that of twenty processes migrating at once each sees the table the first made.
        if (partitions !== undefined && migration.id === KEY_TABLE_MIGRATION && done) refuseRepartitioning(await readKeyTableLayout(tx, schema), partitions, quoted)
        if (done) return
        try {
          await tx.query({ text: migration.sql })
        } catch (cause) {
          if (sqlState(cause) === SQLSTATE.lockNotAvailable) throw cause
          throw new OncelyError('ONCELY_MIGRATION_FAILED', `migration ${migration.name} failed: ${(cause as Error).message}`, { cause })
        }
        await tx.query({ text: INSERT_APPLIED_MIGRATION(quoted), values: [migration.id, migration.name, migration.breaking] })
        applied.push(migration)
      }),
    )
  }
  return { applied, newer: newer.map(({ id, name }) => ({ id, name })) }
}

/** Where a schema stands against the migrations this version ships. */
export interface MigrationStatus {
  /** Shipped migrations not applied yet: `oncely migrate` applies them. */
  pending: Array<{ id: number; name: string }>
  /** Applied by a newer oncely; a breaking one means this version must not run on the schema. */
  newer: Array<{ id: number; name: string; breaking: boolean }>
}

/**
 * Reads, without changing anything, which shipped migrations a schema lacks and which newer ones
 * it has: for a process started with migrations turned off, to refuse to run on a schema it does
 * not match and say what to run.
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { migrationStatus } from 'oncely/postgres'
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * const { pending } = await migrationStatus({ pool })
 * if (pending.length > 0) console.error('run: npx oncely migrate')
 * ```
 */
export async function migrationStatus(options: { pool: PoolLike; schema?: string }): Promise<MigrationStatus> {
  const { pool, schema, quoted } = resolveMigrateOptions(options)
  const migrations = await loadMigrations(schema)
  const { rows: exists } = await pool.query<{ present: boolean }>({ text: TABLE_EXISTS, values: [`${quoted}.migrations`] })
  const rows = exists[0]?.present === true ? (await pool.query<AppliedMigrationRow>({ text: SELECT_APPLIED_MIGRATIONS(quoted) }).catch(() => oldMigrationsTable(pool, quoted))).rows : []
  const applied = new Set(rows.map((row) => row.id))
  const known = new Set(migrations.map((migration) => migration.id))
  return {
    pending: migrations.filter((migration) => !applied.has(migration.id)).map(({ id, name }) => ({ id, name })),
    newer: rows.filter((row) => !known.has(row.id)).map(({ id, name, breaking }) => ({ id, name, breaking })),
  }
}

/** The SQL `migrate` would run on an empty database, for `oncely migrate --dry-run`. */
export async function migrationSql(schema: string = DEFAULT_SCHEMA, options: { partitions?: number | undefined } = {}): Promise<string> {
  const quoted = quoteSchema(schema)
  const parts = (await loadMigrations(schema, options)).map((migration) => `-- ${migration.name}\n${migration.sql.trim()}\n`)
  return [`${CREATE_SCHEMA(quoted)};\n`, ...parts].join('\n')
}

function resolveMigrateOptions(options: Partial<MigrateOptions> | undefined): { pool: PoolLike; schema: string; quoted: string; lockTimeoutMs: number; timeoutMs: number; partitions: number | undefined } {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object { pool, schema? }', options)
  const { pool } = options
  if (typeof pool !== 'object' || pool === null || typeof pool.query !== 'function' || typeof pool.connect !== 'function') {
    // Described, not shown: a pool's configuration holds the database's password.
    throw invalidHidden('pool', 'must have query() and connect(), like pg.Pool', describeKind(pool))
  }
  const schema = options.schema ?? DEFAULT_SCHEMA
  const quoted = quoteSchema(schema)
  return {
    pool,
    schema,
    quoted,
    lockTimeoutMs: positiveInteger('lockTimeoutMs', options.lockTimeoutMs ?? 2000),
    timeoutMs: positiveInteger('timeoutMs', options.timeoutMs ?? 60_000),
    partitions: resolvePartitions(options.partitions),
  }
}

function refuseBreaking(quoted: string, newer: AppliedMigrationRow[]): void {
  const breaking = newer.filter((row) => row.breaking)
  if (breaking.length > 0) {
    throw new OncelyError(
      'ONCELY_SCHEMA_TOO_NEW',
      `schema ${quoted} has breaking migrations this version of oncely does not ship (${breaking.map((row) => row.name).join(', ')}): upgrade oncely`,
    )
  }
}

/**
 * Runs `attempt` again while it fails on a lock wait (SQLSTATE 55P03), with a short jittered
 * pause, until `deadline`; then throws `ONCELY_MIGRATION_LOCKED`.
 */
async function retryWhileLocked(deadline: number, timeoutMs: number, attempt: () => Promise<void>): Promise<void> {
  for (;;) {
    try {
      return await attempt()
    } catch (error) {
      if (sqlState(error) !== SQLSTATE.lockNotAvailable) throw error
      if (Date.now() >= deadline) {
        throw new OncelyError('ONCELY_MIGRATION_LOCKED', `the migration lock, or a table a migration alters, stayed held for ${timeoutMs} ms: is a migrator or a long transaction stuck?`, { cause: error })
      }
      await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 200))
    }
  }
}

/** A migrations table from before `breaking` existed: every row counts as additive. */
async function oldMigrationsTable(db: Queryable, quoted: string): Promise<{ rows: AppliedMigrationRow[] }> {
  const { rows } = await db.query<{ id: number; name: string }>({ text: SELECT_APPLIED_MIGRATIONS_WITHOUT_BREAKING(quoted) })
  return { rows: rows.map((row) => ({ ...row, breaking: false })) }
}
