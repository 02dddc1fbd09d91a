import { migrationStatus, type PoolLike } from '../store/postgres/index.js'
import { SERVICE_SCHEMA } from './sql.js'

const SERVICE_TABLE_EXISTS = `SELECT to_regclass('${SERVICE_SCHEMA}.charges') IS NOT NULL AS present`

/**
 * Refuses to start on a schema the service cannot run on, saying what to run, rather than
 * answering 503 to every request: oncely's migrations not all applied (with `--no-migrate`, or
 * another process's schema), a breaking migration of a newer oncely, or the service's own tables
 * missing.
 */
export async function checkSchemaAtStart(pool: PoolLike, options: { schema: string; migrated: boolean }): Promise<void> {
  const { pending, newer } = await migrationStatus({ pool, schema: options.schema })
  const skip = options.migrated ? '' : ', or start without --no-migrate'
  if (pending.length > 0) {
    throw new Error(
      `schema "${options.schema}" lacks oncely's migrations ${pending.map((m) => m.name).join(', ')}: run \`npx oncely migrate --schema '${options.schema}'\` with this DATABASE_URL${skip}`,
    )
  }
  const breaking = newer.filter((migration) => migration.breaking)
  if (breaking.length > 0) {
    throw new Error(`schema "${options.schema}" was migrated by a newer oncely (breaking: ${breaking.map((m) => m.name).join(', ')}): upgrade this one`)
  }
  const { rows } = await pool.query<{ present: boolean }>({ text: SERVICE_TABLE_EXISTS })
  if (rows[0]?.present !== true) {
    throw new Error(`the service's own tables (schema ${SERVICE_SCHEMA}) are missing: start it once without --no-migrate, which creates them`)
  }
}
