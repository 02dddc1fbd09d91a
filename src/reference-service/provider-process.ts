import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'

/** The provider the service talks to, and how to stop it. */
export interface ProviderHandle {
  readonly url: string
  readonly description: string
  stop(): Promise<void>
}

/**
 * Starts the fake provider as a child process on `port`, or adopts one a crashed run left on that
 * port (it holds the charges made before the crash, which the restarted API must see).
 */
export async function startProviderProcess(options: { host: string; port: number; latencyMs: number; log: (line: string) => void }): Promise<ProviderHandle> {
  if (options.port !== 0) {
    const orphan = await probeProvider(`http://${options.host}:${options.port}`)
    if (orphan) {
      options.log(`reusing the fake provider left running on port ${options.port} (pid ${orphan.pid})`)
      return {
        url: `http://${options.host}:${options.port}`,
        description: `fake provider (pid ${orphan.pid}, adopted)`,
        stop: () => stopPid(orphan.pid),
      }
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
    description: `fake provider (pid ${child.pid ?? '?'})`,
    stop: () => stopChild(child),
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
    const force = setTimeout(() => child.kill('SIGKILL'), 5000)
    child.once('exit', () => {
      clearTimeout(force)
      resolve()
    })
    child.kill('SIGTERM')
  })
}

async function stopPid(pid: number): Promise<void> {
  try {
    process.kill(pid, 'SIGTERM')
  } catch {
    return
  }
  const deadline = Date.now() + 5000
  // Not our child: polling is the only way to see it go.
  while (Date.now() < deadline) {
    try {
      process.kill(pid, 0)
    } catch {
      return
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}
