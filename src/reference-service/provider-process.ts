import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { isAlive, signal, waitForExit } from '../embedded-postgres/running-server.js'

/** The provider the service talks to, and how to stop it. */
export interface ProviderHandle {
  readonly url: string
  readonly description: string
  /** The provider's process, when this service started or adopted it. */
  readonly pid?: number
  /** Whether it was left running by a service that died, rather than started now. */
  readonly adopted: boolean
  /** SIGTERM, then SIGKILL after 2 s. */
  stop(): Promise<void>
  /** SIGKILL now, synchronously, if it still runs: for a process that must exit now. */
  kill(): void
}

/** How long a stop waits for the provider to exit on SIGTERM before SIGKILL. */
const STOP_GRACE_MS = 2000

/**
 * Starts the fake provider as a child process on `port`, or adopts the one the folder's previous
 * service started and left running when it crashed (`leftover`, from its record): it holds the
 * charges made before the crash, which the restarted API must see. A provider nobody recorded
 * belongs to someone else and is never adopted.
 */
export async function startProviderProcess(options: {
  host: string
  port: number
  latencyMs: number
  leftover?: { pid: number; url: string } | undefined
  log: (line: string) => void
}): Promise<ProviderHandle> {
  const { leftover } = options
  if (leftover && (await probeProvider(leftover.url))?.pid === leftover.pid) {
    options.log(`adopting the fake provider left running at ${leftover.url} (pid ${leftover.pid}) by a service that stopped without stopping it`)
    return {
      url: leftover.url,
      pid: leftover.pid,
      adopted: true,
      description: `fake provider (pid ${leftover.pid}, adopted)`,
      stop: () => stopPid(leftover.pid),
      kill: () => {
        if (isAlive(leftover.pid)) signal(leftover.pid, 'SIGKILL')
      },
    }
  }
  if (options.port !== 0) {
    const stranger = await probeProvider(`http://${options.host}:${options.port}`)
    if (stranger) {
      throw new Error(`port ${options.port} is in use by a fake provider (pid ${stranger.pid}) that this folder's service did not start; stop it, or set PROVIDER_PORT`)
    }
  }
  // The child runs the same way this process does: compiled JavaScript, or TypeScript under tsx.
  const extension = import.meta.url.endsWith('.ts') ? '.ts' : '.js'
  const entry = fileURLToPath(new URL(`./provider-main${extension}`, import.meta.url))
  const child = spawn(process.execPath, [...process.execArgv, entry], {
    env: { ...process.env, PROVIDER_HOST: options.host, PROVIDER_PORT: String(options.port), PROVIDER_LATENCY_MS: String(options.latencyMs) },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const url = await readyUrl(child)
  return {
    url,
    ...(child.pid === undefined ? {} : { pid: child.pid }),
    adopted: false,
    description: `fake provider (pid ${child.pid ?? '?'})`,
    stop: () => stopChild(child),
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    },
  }
}

function readyUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let output = ''
    const onData = (chunk: string) => {
      output += chunk
      const match = /listening on (http:\/\/\S+)/.exec(output)
      if (match?.[1]) {
        child.stdout?.off('data', onData)
        child.off('exit', onExit)
        // Keep draining, so the child never blocks on a full pipe.
        child.stdout?.resume()
        resolve(match[1])
      }
    }
    const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
      reject(new Error(`the fake provider exited before it was ready (code ${code}, signal ${signal}):\n${output}`))
    }
    child.stdout?.setEncoding('utf8').on('data', onData)
    child.once('exit', onExit)
    child.once('error', reject)
  })
}

async function probeProvider(url: string): Promise<{ pid: number } | undefined> {
  try {
    const response = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) })
    const body = (await response.json()) as { service?: unknown; pid?: unknown }
    return body.service === 'oncely-fake-provider' && typeof body.pid === 'number' ? { pid: body.pid } : undefined
  } catch {
    return undefined
  }
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => {
    const force = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS)
    child.once('exit', () => {
      clearTimeout(force)
      resolve()
    })
    child.kill('SIGTERM')
  })
}

async function stopPid(pid: number): Promise<void> {
  if (!signal(pid, 'SIGTERM')) return
  if (!(await waitForExit(pid, STOP_GRACE_MS))) {
    if (!signal(pid, 'SIGKILL')) return
    await waitForExit(pid, 1000)
  }
}
