import { mkdtemp, chmod, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import type { TestProject } from 'vitest/node'
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../../src/embedded-postgres/start.js'
import { migrate } from '../../src/store/postgres/migrate.js'
import { createReservationsTable, type ConnectionBudget } from '../helpers/connection-budget.js'

declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser URL of the test server (embedded, or DATABASE_URL). */
    adminUrl: string
    /** The migrated database each test file clones. */
    templateDatabase: string
    /** The schema the suite runs under (`ONCELY_TEST_SCHEMA`, default `oncely`). */
    schema: string
    serverVersion: string
    /** The table and limit of the suite's share of the server's connections (test/helpers/connection-budget.ts). */
    connectionBudget: ConnectionBudget
  }
}

/**
 * Real PostgreSQL (docs/conventions.md, Tests): start it once (embedded unless DATABASE_URL is
 * set), migrate a template database once; each test file clones it (test/helpers/db.ts).
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let embedded: EmbeddedDatabase | undefined
  let dataRoot: string | undefined
  let adminUrl = process.env.DATABASE_URL
  if (!adminUrl) {
    dataRoot = await mkdtemp(path.join(tmpdir(), 'oncely-test-pg-'))
    // As root, PostgreSQL runs as the `postgres` user, which must reach the data folder.
    await chmod(dataRoot, 0o755)
    embedded = await startEmbeddedPostgres({ dataDir: path.join(dataRoot, 'data'), ephemeral: true })
    adminUrl = embedded.url
  }
  const schema = process.env.ONCELY_TEST_SCHEMA ?? 'oncely'
  const templateDatabase = `oncely_template_${process.pid}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  const serverVersion = (await admin.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version ?? '?'
  await admin.query(`DROP DATABASE IF EXISTS ${templateDatabase}`)
  await admin.query(`CREATE DATABASE ${templateDatabase}`)
  const templatePool = new pg.Pool({ connectionString: withDatabase(adminUrl, templateDatabase), max: 2 })
  await migrate({ pool: templatePool, schema })
  await templatePool.end()
  const connectionBudget = await createConnectionBudget(admin)
  await admin.end()
  process.stdout.write(`oncely tests: PostgreSQL ${serverVersion} (${embedded ? 'embedded' : 'DATABASE_URL'}), schema "${schema}"\n`)

  project.provide('adminUrl', adminUrl)
  project.provide('templateDatabase', templateDatabase)
  project.provide('schema', schema)
  project.provide('serverVersion', serverVersion)
  project.provide('connectionBudget', connectionBudget)

  return async () => {
    const cleanup = new pg.Client({ connectionString: adminUrl })
    await cleanup.connect()
    const { rows } = await cleanup.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname = $1 OR datname LIKE $2`,
      [templateDatabase, `oncely_test_${process.pid}_%`],
    )
    for (const { datname } of rows) await cleanup.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`)
    await cleanup.query(`DROP TABLE IF EXISTS ${connectionBudget.table}`)
    await cleanup.end()
    await embedded?.stop()
    if (dataRoot) await rm(dataRoot, { recursive: true, force: true })
  }
}

/**
 * The reservations' table, in the admin database, and the budget: the server's `max_connections`
 * (100 on a stock PostgreSQL 15, 300 on the embedded one) but for a margin for the connections
 * that reserve nothing (the admin clients, the reservations' own, and the superuser slots).
 */
async function createConnectionBudget(admin: pg.Client): Promise<ConnectionBudget> {
  const table = `oncely_test_connection_budget_${process.pid}`
  await createReservationsTable(admin, table)
  const maxConnections = Number((await admin.query<{ max_connections: string }>('SHOW max_connections')).rows[0]?.max_connections)
  return { table, limit: maxConnections - 12 }
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  return parsed.toString()
}
