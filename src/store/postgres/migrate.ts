import { OncelyError } from '../../errors.js'
import { withTransaction, type PoolLike, type Queryable } from './executor.js'
import { MIGRATION_FILES } from './migration-files.js'
import { DEFAULT_SCHEMA, quoteSchema } from './schema-name.js'

/** One numbered `.sql` file. */
export interface Migration {
  id: number
  name: string
  sql: string
}

export interface MigrateOptions {
  pool: PoolLike
  /** Schema to create the tables in. (Default: `oncely`) */
  schema?: string
}

export interface MigrateResult {
  /** Migrations this call applied, in order; empty when the schema was already current. */
  applied: Migration[]
}

/** The shipped migrations, ordered by number, with the schema filled in. */
export async function loadMigrations(schema: string = DEFAULT_SCHEMA): Promise<Migration[]> {
  const quoted = quoteSchema(schema)
  return Promise.resolve(
    MIGRATION_FILES.map((file) => ({ id: Number.parseInt(file.name, 10), name: file.name, sql: file.sql.replaceAll('{{schema}}', quoted) })),
  )
}

/**
 * Applies the schema: each migration in its own transaction, under a transaction-scoped
 * advisory lock, so twenty processes migrating at once end with one schema and no error
 * (style rule 9). Safe to run again: applied migrations are skipped.
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
  const schema = options.schema ?? DEFAULT_SCHEMA
  const quoted = quoteSchema(schema)
  const migrations = await loadMigrations(schema)
  const known = new Set(migrations.map((migration) => migration.id))
  const applied: Migration[] = []
  for (const migration of migrations) {
    await withTransaction(options.pool, async (tx) => {
      await lockSchema(tx, schema)
      await tx.query({ text: `CREATE SCHEMA IF NOT EXISTS ${quoted}` })
      await tx.query({
        text: `CREATE TABLE IF NOT EXISTS ${quoted}.migrations (
                 id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      })
      const { rows } = await tx.query<{ id: number }>({ text: `SELECT id FROM ${quoted}.migrations` })
      const unknown = rows.filter((row) => !known.has(row.id))
      if (unknown.length > 0) {
        throw new OncelyError(
          'ONCELY_SCHEMA_TOO_NEW',
          `schema ${quoted} has migrations ${unknown.map((row) => row.id).join(', ')} that this version of oncely does not ship`,
        )
      }
      if (rows.some((row) => row.id === migration.id)) return
      try {
        await tx.query({ text: migration.sql })
      } catch (cause) {
        throw new OncelyError('ONCELY_MIGRATION_FAILED', `migration ${migration.name} failed: ${(cause as Error).message}`, { cause })
      }
      await tx.query({ text: `INSERT INTO ${quoted}.migrations (id, name) VALUES ($1, $2)`, values: [migration.id, migration.name] })
      applied.push(migration)
    })
  }
  return { applied }
}

/** The SQL `migrate` would run on an empty database, for `oncely migrate --dry-run`. */
export async function migrationSql(schema: string = DEFAULT_SCHEMA): Promise<string> {
  const quoted = quoteSchema(schema)
  const parts = (await loadMigrations(schema)).map((migration) => `-- ${migration.name}\n${migration.sql.trim()}\n`)
  return [`CREATE SCHEMA IF NOT EXISTS ${quoted};\n`, ...parts].join('\n')
}

/**
 * Serialises migrators of one schema. The lock is transaction-scoped, so it is released by
 * COMMIT or ROLLBACK even if the process dies, and it works through PgBouncer.
 */
async function lockSchema(tx: Queryable, schema: string): Promise<void> {
  await tx.query({ text: `SELECT pg_advisory_xact_lock(hashtext('oncely:migrate'), hashtext($1))`, values: [schema] })
}
