import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

/** Debian's PgBouncer, when installed (`apt-get install -y pgbouncer`; .ci/run does it). */
export const PGBOUNCER = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((file) => existsSync(file))

export interface PgBouncer {
  /** `url` with PgBouncer's host and port in place of the server's. */
  readonly url: string
  /** The `major.minor` version, e.g. [1, 18]. */
  readonly version: [number, number]
  stderr(): string
  stop(): Promise<void>
}

async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

async function versionOf(binary: string): Promise<[number, number]> {
  const child = spawn(binary, ['--version'], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk))
  await new Promise((resolve) => child.once('close', resolve))
  const found = /PgBouncer (\d+)\.(\d+)/.exec(out)
  if (!found) throw new Error(`pgbouncer --version printed no version: ${out}`)
  return [Number(found[1]), Number(found[2])]
}

/**
 * PgBouncer in transaction mode in front of the server of `url`, on a free port, trust auth, one
 * server connection per database and user (`default_pool_size`), so clients share it: what one
 * client leaves on it (a prepared statement, a session lock) the next one finds.
 */
export async function startPgBouncer(url: string, settings: Record<string, string | number> = {}): Promise<PgBouncer> {
  if (PGBOUNCER === undefined) throw new Error('pgbouncer is not installed')
  const server = new URL(url)
  const port = await freePort()
  const dir = await mkdtemp(path.join(tmpdir(), 'oncely-pgbouncer-'))
  // Started as root, PgBouncer runs as `postgres`, which must read its files.
  await chmod(dir, 0o755)
  const user = decodeURIComponent(server.username || 'postgres')
  const ini = [
    '[databases]',
    // The server's own password (the embedded PostgreSQL has one) logs PgBouncer in; clients are trusted.
    `* = host=${server.hostname} port=${server.port || 5432}${server.password ? ` user=${user} password=${decodeURIComponent(server.password)}` : ''}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = trust',
    `auth_file = ${path.join(dir, 'userlist.txt')}`,
    'pool_mode = transaction',
    'default_pool_size = 1',
    'max_client_conn = 100',
    ...(process.getuid?.() === 0 ? ['user = postgres'] : []),
    ...Object.entries(settings).map(([name, value]) => `${name} = ${value}`),
  ].join('\n')
  await writeFile(path.join(dir, 'pgbouncer.ini'), `${ini}\n`, { mode: 0o644 })
  await writeFile(path.join(dir, 'userlist.txt'), `"${user}" ""\n`, { mode: 0o644 })
  const version = await versionOf(PGBOUNCER)
  const child: ChildProcess = spawn(PGBOUNCER, [path.join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'pipe', 'pipe'] })
  const untrack = trackOpenHandle(`pgbouncer on port ${port}`)
  let stderr = ''
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()))
  let gone = false
  void exited.then(() => {
    gone = true
    untrack()
  })
  const bouncerUrl = new URL(url)
  bouncerUrl.hostname = '127.0.0.1'
  bouncerUrl.port = String(port)
  // Ready once it answers a query through to the server; a few hundred tries, then its log says why not.
  for (let attempt = 0; ; attempt++) {
    if (gone) throw new Error(`pgbouncer exited before it was ready:\n${stderr}`)
    if (attempt === 400) {
      child.kill('SIGINT')
      throw new Error(`pgbouncer did not answer through to the server:\n${stderr}`)
    }
    const client = new pg.Client({ connectionString: bouncerUrl.href })
    try {
      await client.connect()
      await client.query('SELECT 1')
      await client.end()
      break
    } catch {
      await client.end().catch(() => undefined)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  return {
    url: bouncerUrl.href,
    version,
    stderr: () => stderr,
    async stop() {
      if (!gone) child.kill('SIGINT')
      await exited
      await rm(dir, { recursive: true, force: true })
    },
  }
}
