import { spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { waitForReadyLine } from '../../src/cli/ready-line.js'
import { trackOpenHandle } from '../setup/guard-open-handles.js'

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

/** A process started by a test: the service or the provider, running the current source. */
export interface TestProcess {
  readonly child: ChildProcess
  /** The `http://HOST:PORT` from its ready line. */
  readonly url: string
  stdout(): string
  stderr(): string
  /** Settles when the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  /** SIGTERM, then SIGKILL after 10 s; resolves once it has exited. */
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

export interface StartOptions {
  env?: Record<string, string>
  /** How long to wait for the ready line. (Default: 60000) */
  readyTimeoutMs?: number
  cwd?: string
}

/**
 * Starts `node --import tsx src/cli/main.ts <args>` and waits for its `listening on
 * http://HOST:PORT` line. Registered as an open handle until it has exited.
 */
export async function startCli(args: readonly string[], options: StartOptions = {}): Promise<TestProcess> {
  return startProcess(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'src/cli/main.ts'), ...args], options)
}

export async function startProcess(command: string, args: readonly string[], options: StartOptions & { detached?: boolean } = {}): Promise<TestProcess> {
  const child = spawn(command, args, {
    cwd: options.cwd ?? REPO_ROOT,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached ?? false,
  })
  const untrack = trackOpenHandle(`process ${path.basename(command)} ${args.slice(-4).join(' ')}`)
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('close', (code, signal) => {
      untrack()
      resolve({ code, signal })
    })
  })
  const url = await waitForReadyLine(child, {
    output: () => stdout,
    exited,
    timeoutMs: options.readyTimeoutMs ?? 60_000,
    describe: () => `stdout:\n${stdout}\nstderr:\n${stderr}`,
  })
  return {
    child,
    url,
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM')
        const force = setTimeout(() => child.kill('SIGKILL'), 10_000)
        const result = await exited
        clearTimeout(force)
        return result
      }
      return exited
    },
  }
}

/** The fake provider alone, on a free port. */
export function startProvider(options: { latencyMs?: number; flakyN?: number } = {}): Promise<TestProcess> {
  return startCli(['provider', '--port', '0', '--latency-ms', String(options.latencyMs ?? 0), '--flaky-n', String(options.flakyN ?? 1)])
}

export interface ServiceOptions {
  databaseUrl: string
  schema: string
  providerUrl: string
  staleAfterMs?: number
  ttlMs?: number
  strategy?: string
  chaos?: boolean
  env?: Record<string, string>
}

/** The reference service on a free port, against a test database and a provider already running. */
export function startService(options: ServiceOptions): Promise<TestProcess> {
  const args = ['serve', '--port', '0', '--database-url', options.databaseUrl, '--schema', options.schema, '--provider-url', options.providerUrl]
  if (options.staleAfterMs !== undefined) args.push('--stale-after-ms', String(options.staleAfterMs))
  if (options.ttlMs !== undefined) args.push('--ttl-ms', String(options.ttlMs))
  if (options.strategy !== undefined) args.push('--strategy', options.strategy)
  if (options.chaos) args.push('--chaos')
  return startCli(args, { env: options.env ?? {} })
}

/** The provider's charges, optionally only those made for one user of the service. */
export async function providerCharges(providerUrl: string, userId?: string): Promise<Array<{ id: string; metadata: Record<string, string> }>> {
  const response = await fetch(`${providerUrl}/v1/charges`)
  const { data } = (await response.json()) as { data: Array<{ id: string; metadata: Record<string, string> }> }
  return userId === undefined ? data : data.filter((charge) => charge.metadata.user_id === userId)
}
