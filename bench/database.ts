import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../src/embedded-postgres/start.js'

/** A database of the benchmark's own, dropped at the end: on `DATABASE_URL`, or an embedded server. */
export interface BenchDatabase {
  readonly url: string
  readonly version: string
  readonly where: string
  close(): Promise<void>
}

export async function openBenchDatabase(): Promise<BenchDatabase> {
  let embedded: EmbeddedDatabase | undefined
  let dataRoot: string | undefined
  let serverUrl = process.env.DATABASE_URL || undefined
  if (!serverUrl) {
    dataRoot = await mkdtemp(path.join(tmpdir(), 'oncely-bench-'))
    await chmod(dataRoot, 0o755)
    embedded = await startEmbeddedPostgres({ dataDir: path.join(dataRoot, 'data'), ephemeral: true })
    serverUrl = embedded.url
  }
  const name = `oncely_bench_${process.pid}`
  const admin = new pg.Client({ connectionString: serverUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  const version = (await admin.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version ?? 'unknown'
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  const close = async () => {
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal)
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.end()
    await embedded?.stop()
    if (dataRoot) await rm(dataRoot, { recursive: true, force: true })
  }
  // Interrupted, the run still drops its database: `--scale` leaves gigabytes on a shared disk.
  function onSignal(signal: NodeJS.Signals): void {
    process.stderr.write(`bench: ${signal}, dropping ${name}\n`)
    void close().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143))
  }
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal)
  return { url: url.toString(), version, where: embedded ? 'embedded' : 'DATABASE_URL', close }
}
