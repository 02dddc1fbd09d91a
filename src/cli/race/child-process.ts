import { spawn, type ChildProcess } from 'node:child_process'
import { waitForReadyLine } from '../ready-line.js'

/** A child `oncely serve` or `oncely provider`, ready: it printed `listening on http://HOST:PORT`. */
export interface OncelyChild {
  /** The URL from its ready line. */
  readonly url: string
  readonly pid: number
  /** Settles when the process has exited, with its signal if it was killed. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  /** Its output so far, for an error message. */
  output(): string
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once it has exited. */
  stop(graceMs?: number): Promise<void>
}

/** Children still running, killed when this process exits however it exits. */
const live = new Set<ChildProcess>()
let exitHookInstalled = false

/** SIGKILLs every child still running; their pending starts and requests then fail. */
export function killChildren(): void {
  for (const child of live) child.kill('SIGKILL')
}

function installExitHook(): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.on('exit', killChildren)
}

/**
 * Starts `oncely <args>` the way this process runs: the same Node flags (`--import tsx` from
 * source) and the same entry point (`dist/cli/main.js` or `src/cli/main.ts`). Resolves once its
 * ready line is printed; rejects if it exits first or is not ready within `readyTimeoutMs`.
 */
export async function startOncely(args: readonly string[], options: { env?: Record<string, string>; readyTimeoutMs?: number } = {}): Promise<OncelyChild> {
  const entry = process.argv[1]
  if (entry === undefined) throw new Error('cannot tell which script is running: process.argv[1] is missing')
  installExitHook()
  const child = spawn(process.execPath, [...process.execArgv, entry, ...args], {
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  live.add(child)
  let output = ''
  const collect = (chunk: string) => {
    // Only the start matters for an error message; a long run must not grow this without bound.
    if (output.length < 64 * 1024) output += chunk
  }
  child.stdout.setEncoding('utf8').on('data', collect)
  child.stderr.setEncoding('utf8').on('data', collect)
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child)
      resolve({ code, signal })
    })
  })
  const url = await waitForReadyLine(child, {
    output: () => output,
    exited,
    timeoutMs: options.readyTimeoutMs ?? 30_000,
    describe: () => `oncely ${args[0] ?? ''}:\n${output}`,
  })
  return {
    url,
    pid: child.pid ?? -1,
    exited,
    output: () => output,
    async stop(graceMs = 5000) {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs)
      await exited
      clearTimeout(timer)
    },
  }
}
