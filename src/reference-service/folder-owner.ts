import { mkdir, readFile, rm, rmdir, stat, unlink, writeFile } from 'node:fs/promises'
import { connect, createServer, type Server, type Socket } from 'node:net'
import path from 'node:path'

/**
 * What a running service tells whoever asks at its folder's socket, and what it leaves in
 * `service.json` for the start after a crash: the processes it owns, so that one can adopt them.
 */
export interface OwnerRecord {
  pid: number
  /** `http://HOST:PORT` of the API, once it listens. */
  url?: string
  /** The embedded PostgreSQL's URL, when the service runs one. */
  databaseUrl?: string
  /** The child provider, when the service runs one. */
  provider?: { pid: number; url: string }
}

/** Another live service holds the folder: it answered on the folder's socket. */
export class FolderInUseError extends Error {
  override name = 'FolderInUseError'
  constructor(
    readonly folder: string,
    readonly owner: OwnerRecord,
  ) {
    super(
      `${folder} is in use by a running oncely service (pid ${owner.pid}${owner.url ? `, ${owner.url}` : ''}); ` +
        'stop it first, or give this one another port and data folder (PORT, PROVIDER_PORT, ONCELY_DATA_DIR)',
    )
  }
}

/** The folder, held by this process until `release()`. */
export interface FolderClaim {
  /** What the previous owner recorded; it is dead (it did not answer), so what it started is left over. */
  readonly previous: OwnerRecord | undefined
  /** Serves `record` on the socket and saves it for the start after a crash. */
  publish(record: OwnerRecord): Promise<void>
  /** Closes the socket and removes the record: a clean stop leaves nothing to adopt. */
  release(): Promise<void>
}

export const SOCKET_NAME = 'service.sock'
const RECORD_NAME = 'service.json'
const MUTEX_NAME = 'claim.lock'
/** A claim takes milliseconds; a mutex folder older than this was left by a process that died claiming. */
const MUTEX_STALE_MS = 10_000

/**
 * Takes `folder` (`.oncely` by default) for this process. A PID alone cannot tell a live owner
 * from a leftover, since PIDs are reused: the proof is a Unix socket the owner listens on. It
 * answers while the owner lives and refuses connections once it is gone, even after a SIGKILL.
 * Throws `FolderInUseError` naming the live owner, having touched nothing.
 */
export async function claimFolder(folder: string): Promise<FolderClaim> {
  await mkdir(folder, { recursive: true, mode: 0o755 })
  const socketPath = shortPath(path.join(folder, SOCKET_NAME))
  const recordPath = path.join(folder, RECORD_NAME)
  let current: OwnerRecord = { pid: process.pid }
  // A peer that keeps its half of a connection open would hold close() and the service's stop.
  const connections = new Set<Socket>()
  const server = createServer((socket) => {
    connections.add(socket)
    socket.once('close', () => connections.delete(socket))
    socket.on('error', () => {})
    socket.end(`${JSON.stringify(current)}\n`)
  })
  server.unref()
  // Two starts at once could both find a dead socket and both replace it: the mutex makes
  // "find it dead, unlink it, listen" one step.
  await withMutex(path.join(folder, MUTEX_NAME), async () => {
    if (!(await listen(server, socketPath))) {
      const owner = await askOwner(socketPath)
      if (owner) throw new FolderInUseError(folder, owner)
      await unlink(socketPath).catch(() => {})
      if (!(await listen(server, socketPath))) throw new Error(`could not listen on ${socketPath}`)
    }
  })
  const previous = await readRecord(recordPath)
  return {
    previous,
    async publish(record) {
      current = record
      await writeFile(recordPath, `${JSON.stringify(record)}\n`)
    },
    async release() {
      await rm(recordPath, { force: true })
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      for (const socket of connections) socket.destroy()
      await closed
      await unlink(socketPath).catch(() => {})
    },
  }
}

/** The live owner's record, or undefined when nothing answers on the folder's socket. */
export async function askOwner(socketPath: string, timeoutMs = 2000): Promise<OwnerRecord | undefined> {
  return new Promise((resolve) => {
    let text = ''
    const socket = connect(shortPath(socketPath))
    const done = (value: OwnerRecord | undefined) => {
      clearTimeout(timer)
      socket.destroy()
      resolve(value)
    }
    // A socket that accepts but never answers is held by something alive: count it as an owner.
    const timer = setTimeout(() => done({ pid: 0 }), timeoutMs)
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => (text += chunk))
    socket.on('end', () => done(parseRecord(text) ?? { pid: 0 }))
    socket.on('error', () => done(undefined))
  })
}

function listen(server: Server, socketPath: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException) => {
      server.off('listening', onListening)
      if (error.code === 'EADDRINUSE') resolve(false)
      else reject(error)
    }
    const onListening = () => {
      server.off('error', onError)
      resolve(true)
    }
    server.once('error', onError)
    server.once('listening', onListening)
    server.listen(socketPath)
  })
}

async function withMutex<T>(mutexPath: string, work: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + MUTEX_STALE_MS * 2
  for (;;) {
    try {
      await mkdir(mutexPath)
      break
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || Date.now() > deadline) throw error
      const age = await stat(mutexPath).then((info) => Date.now() - info.mtimeMs, () => 0)
      if (age > MUTEX_STALE_MS) await rmdir(mutexPath).catch(() => {})
      else await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  try {
    return await work()
  } finally {
    await rmdir(mutexPath).catch(() => {})
  }
}

async function readRecord(recordPath: string): Promise<OwnerRecord | undefined> {
  return parseRecord(await readFile(recordPath, 'utf8').catch(() => ''))
}

function parseRecord(text: string): OwnerRecord | undefined {
  try {
    const value = JSON.parse(text) as OwnerRecord
    return typeof value === 'object' && value !== null && typeof value.pid === 'number' ? value : undefined
  } catch {
    return undefined
  }
}

/** A Unix socket path is limited to about 100 bytes: the path relative to here is often shorter. */
function shortPath(socketPath: string): string {
  const relative = path.relative(process.cwd(), socketPath)
  return relative.length < socketPath.length ? relative || '.' : socketPath
}
