import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { startEmbeddedPostgres } from '../../embedded-postgres/start.js'
import { buildDatabaseStatements, SHOW_SERVER_VERSION, type ServerVersionRow } from '../../store/postgres/statements-databases.js'

/** The PostgreSQL server the race runs on, with a fresh database per scenario. */
export interface RaceServer {
  /** `SHOW server_version`. */
  readonly version: string
  /** `embedded` or `DATABASE_URL`. */
  readonly source: 'embedded' | 'DATABASE_URL'
  /** Creates an empty database and returns its URL; dropped by `drop` or `close`. */
  createDatabase(name: string): Promise<string>
  dropDatabase(name: string): Promise<void>
  /** Drops what is left, closes the connection, stops the embedded server. */
  close(): Promise<void>
}

/**
 * Connects to `url`, or, when it is undefined, starts an embedded PostgreSQL in a temporary
 * folder that is removed on close.
 */
export async function openRaceServer(url: string | undefined, log: (line: string) => void): Promise<RaceServer> {
  let stopEmbedded = async () => {}
  let adminUrl = url
  if (adminUrl === undefined) {
    const root = await mkdtemp(path.join(tmpdir(), 'oncely-race-'))
    // As root, PostgreSQL runs as the `postgres` user, which must reach the data folder.
    await chmod(root, 0o755)
    const lines: string[] = []
    const listeners = snapshotExitListeners()
    try {
      const embedded = await startEmbeddedPostgres({ dataDir: path.join(root, 'data'), ephemeral: true, onLog: (line) => lines.push(String(line)) })
      adminUrl = embedded.url
      stopEmbedded = async () => {
        await embedded.stop()
        await rm(root, { recursive: true, force: true })
      }
    } catch (cause) {
      await rm(root, { recursive: true, force: true })
      throw new Error(`the embedded PostgreSQL did not start:\n${lines.slice(-20).join('')}`, { cause })
    } finally {
      listeners.restore()
    }
    log(`started an embedded PostgreSQL at ${redact(adminUrl)}`)
  }
  const admin = new pg.Client({ connectionString: adminUrl })
  try {
    await admin.connect()
  } catch (error) {
    await stopEmbedded()
    throw error
  }
  const base = adminUrl
  const { rows } = await admin.query<ServerVersionRow>(SHOW_SERVER_VERSION)
  const created = new Set<string>()
  const drop = async (name: string) => {
    await admin.query(buildDatabaseStatements(name).drop)
    created.delete(name)
  }
  return {
    version: rows[0]?.server_version ?? 'unknown',
    source: url === undefined ? 'embedded' : 'DATABASE_URL',
    async createDatabase(name) {
      await drop(name)
      await admin.query(buildDatabaseStatements(name).create)
      created.add(name)
      return withDatabase(base, name)
    },
    dropDatabase: drop,
    async close() {
      try {
        for (const name of [...created]) await drop(name)
        await admin.end()
      } finally {
        await stopEmbedded()
      }
    },
  }
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url)
  parsed.pathname = `/${encodeURIComponent(database)}`
  return parsed.toString()
}

/**
 * The `embedded-postgres` package hooks SIGINT, SIGTERM and `exit` to stop its servers and exit
 * at once; `oncely race` stops in its own order (processes, databases, then the server), so the
 * listeners the package adds are removed again.
 */
function snapshotExitListeners(): { restore(): void } {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit'] as const
  const before = new Map(events.map((event) => [event, new Set(process.listeners(event as NodeJS.Signals))]))
  return {
    restore() {
      for (const event of events) {
        for (const listener of process.listeners(event as NodeJS.Signals)) {
          if (!before.get(event)?.has(listener)) process.removeListener(event, listener)
        }
      }
    },
  }
}

function redact(url: string): string {
  const parsed = new URL(url)
  if (parsed.password) parsed.password = '***'
  return parsed.toString()
}
