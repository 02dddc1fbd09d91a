import { chmod, mkdir, stat } from 'node:fs/promises'
import { userInfo } from 'node:os'
import path from 'node:path'
import { runningServer } from '../embedded-postgres/running-server.js'
import { killServer, stopServer } from '../embedded-postgres/stop-server.js'
import { EmbeddedPostgresMissingError, embeddedPostgresUrl, startEmbeddedPostgres } from '../embedded-postgres/start.js'

/** The database the service runs on, and how to let it go. */
export interface ServiceDatabase {
  readonly url: string
  /** What it is, for the start-up lines. */
  readonly description: string
  /** Whether it was left running by a service that died, rather than started now. */
  readonly adopted: boolean
  /** Bounded: fast shutdown, then immediate, then SIGKILL (stop-server.ts). */
  stop(): Promise<void>
  /** SIGKILL of the embedded server's processes, synchronously, for a process that must exit now. */
  kill(): void
}

/**
 * `DATABASE_URL` when set; otherwise the embedded PostgreSQL under `dataDir`, started, or, when a
 * previous run was killed and left its server running (SIGKILL reaps no children), adopted, so a
 * restart after a crash finds its data where it left it. The caller holds the data folder's
 * claim (folder-owner.ts), so a server found running is a leftover, never a live service's.
 */
export async function openDatabase(options: { databaseUrl: string | undefined; dataDir: string; log: (line: string) => void }): Promise<ServiceDatabase> {
  if (options.databaseUrl !== undefined) {
    return { url: options.databaseUrl, description: 'PostgreSQL at DATABASE_URL', adopted: false, stop: async () => {}, kill: () => {} }
  }
  const dataDir = path.resolve(options.dataDir)
  const orphan = runningServer(dataDir)
  if (orphan) {
    options.log(`adopting the embedded PostgreSQL left running in ${dataDir} (pid ${orphan.pid}) by a service that stopped without stopping it`)
    return {
      url: embeddedPostgresUrl(orphan.port),
      description: `embedded PostgreSQL in ${dataDir} (pid ${orphan.pid}, adopted)`,
      adopted: true,
      stop: async () => {
        if (!(await stopServer(dataDir))) throw new Error(`the embedded PostgreSQL in ${dataDir} (pid ${orphan.pid}) did not exit, even on SIGKILL`)
      },
      kill: () => killServer(dataDir),
    }
  }
  if (userInfo().uid === 0) await makeReachable(dataDir, options.log)
  const lines: string[] = []
  const signalListeners = snapshotSignalListeners()
  let embedded
  try {
    embedded = await startEmbeddedPostgres({ dataDir, onLog: (line) => lines.push(line) })
  } catch (cause) {
    if (cause instanceof EmbeddedPostgresMissingError) throw cause
    const reason = cause instanceof Error ? cause.message : 'the server exited during start-up'
    throw new Error(`the embedded PostgreSQL in ${dataDir} did not start: ${reason}\n${lines.slice(-20).join('')}`.trimEnd(), { cause })
  } finally {
    signalListeners.restore()
  }
  return {
    url: embedded.url,
    description: `embedded PostgreSQL in ${dataDir}${embedded.pid === undefined ? '' : ` (pid ${embedded.pid})`}`,
    adopted: false,
    stop: () => embedded.stop(),
    kill: () => embedded.kill(),
  }
}

/**
 * As root, PostgreSQL runs as the `postgres` system user, which must be able to enter every
 * folder above the data folder. Gives "others" the search bit (enter, not list) on any that
 * lack it, and says so.
 */
async function makeReachable(dataDir: string, log: (line: string) => void): Promise<void> {
  const parent = path.dirname(dataDir)
  await mkdir(parent, { recursive: true, mode: 0o755 })
  await chmod(parent, 0o755)
  for (let dir = path.dirname(parent); ; dir = path.dirname(dir)) {
    const { mode } = await stat(dir)
    if ((mode & 0o001) === 0) {
      await chmod(dir, (mode & 0o7777) | 0o001)
      log(`made ${dir} enterable by the postgres system user (o+x), so the embedded PostgreSQL can reach ${dataDir}`)
    }
    if (path.dirname(dir) === dir) break
  }
}

/**
 * The `embedded-postgres` package hooks SIGINT, SIGTERM and `exit` to stop its servers and exit
 * at once (its `exit` hook even throws, calling a callback it was not given). The service shuts
 * down in its own order (API, provider, then database), so the listeners the package adds are
 * removed again. After a hard crash the server is left running and the next start adopts it.
 */
function snapshotSignalListeners(): { restore(): void } {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit']
  const listeners = (event: string) => process.listeners(event as NodeJS.Signals) as Array<(...args: unknown[]) => void>
  const before = new Map(events.map((event) => [event, new Set(listeners(event))]))
  return {
    restore() {
      for (const event of events) {
        for (const listener of listeners(event)) {
          if (!before.get(event)?.has(listener)) process.removeListener(event, listener)
        }
      }
    },
  }
}

/**
 * The service pool's timeouts: no request waits on the database without bound
 * (docs/reference-service.md, "Database timeouts"). Each statement of a request is a short
 * single-row read or write, so anything slower is a database in trouble, and the request is
 * better answered 503 with `Retry-After` than held.
 */
export const SERVICE_POOL_SETTINGS = Object.freeze({
  max: 20,
  /**
   * Opening a connection, and waiting for a free one when all 20 are busy. Short, because the
   * engine retries a claim's transient failures for up to 2 s on top of it.
   */
  connectionTimeoutMillis: 1_000,
  /** Server side: a statement running longer is cancelled (SQLSTATE 57014). */
  statement_timeout: 5_000,
  /** Server side: a statement waiting longer for a lock fails (SQLSTATE 55P03). */
  lock_timeout: 1_000,
  /** Server side: a transaction left open this long (its process hung) is ended, releasing its locks. */
  idle_in_transaction_session_timeout: 10_000,
  /** Client side: a server that stops answering without closing the connection. Above statement_timeout, so the server reports first. */
  query_timeout: 6_000,
  /** Notices a connection whose peer vanished without a FIN. */
  keepAlive: true,
  /**
   * node-postgres sends a transaction's statements without waiting for each answer: the charge's
   * completion (BEGIN, the fenced completion, the charge row, the event, COMMIT) leaves in one
   * round trip (issue 11). Single statements on the pool are unchanged.
   */
  pipeline: true,
})
