import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { waitForReadyLine, type ChildExit } from '../src/cli/ready-line.js'

// The built CLI, as users run it (`npm run bench` builds first): under tsx the service would also
// pay for the loader, which the issue-21 figures, measured on `dist`, never did.
const CLI = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url))

/**
 * The built CLI of another checkout (`--against DIR` of the peers part and of instructions.ts),
 * refused before anything starts when it is not there.
 */
export function builtCli(dir: string): string {
  const cli = path.resolve(dir, 'dist', 'cli', 'main.js')
  if (!existsSync(cli)) throw new Error(`--against ${dir}: no ${cli}; make one with \`git worktree add ${dir} REV\` and \`npm ci && npm run build\` there`)
  return cli
}

/** A process of the benchmark: its URL, its pid (for its CPU time) and how to stop it. */
export interface BenchProcess {
  readonly url: string
  readonly pid: number
  /** User + system CPU time the process has used so far, in milliseconds (from /proc). */
  cpuMs(): Promise<number>
  /**
   * The same, of its main thread alone (the event loop): the rest is V8's helper threads, garbage
   * collection mostly, and libuv's pool.
   */
  mainThreadCpuMs(): Promise<number>
  /** Write system calls (write, writev…) the process has made so far: its socket writes, mostly (/proc/<pid>/io). */
  writes(): Promise<number>
  /** SIGTERM, then SIGKILL after 10 s. */
  stop(): Promise<void>
  /** SIGKILL at once: for a process whose graceful stop would wait on requests that never end. */
  kill(): Promise<void>
}

/** Runs `oncely <args>` from the build (`dist/`), as its own process, until its ready line. */
export function startCli(args: string[], env: Record<string, string> = {}, nodeOptions: string[] = []): Promise<BenchProcess> {
  return startProgram(CLI, args, env, nodeOptions)
}

/**
 * Runs a TypeScript program (`script`, a path) under tsx as its own process, until it prints
 * `listening on http://…` (the ready line of `oncely serve`).
 */
export async function startProgram(script: string, args: string[], env: Record<string, string> = {}, nodeOptions: string[] = []): Promise<BenchProcess> {
  const loader = script.endsWith('.js') ? [] : ['--import', 'tsx']
  const child: ChildProcessWithoutNullStreams = spawn(process.execPath, [...nodeOptions, ...loader, script, ...args], {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  // The last 16 KiB only: a service that logs on every request would grow it without bound.
  let output = ''
  const keep = (chunk: string) => (output = (output + chunk).slice(-16_384))
  child.stdout.setEncoding('utf8').on('data', keep)
  child.stderr.setEncoding('utf8').on('data', keep)
  const exited = new Promise<ChildExit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  const url = await waitForReadyLine(child, { output: () => output, exited, timeoutMs: 60_000, describe: () => `${script} ${args.join(' ')}\n${output}` })
  const pid = child.pid ?? 0
  return {
    url,
    pid,
    cpuMs: () => processCpuMs(pid),
    // A process's main thread is the task whose id is the process's own.
    mainThreadCpuMs: () => processCpuMs(pid, pid),
    writes: () => processWrites(pid),
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
      await exited
      clearTimeout(timer)
    },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill('SIGKILL')
      await exited
    },
  }
}

/** Clock ticks per second of /proc's CPU times (USER_HZ, `getconf CLK_TCK`): 100 on Linux, read once. */
const TICKS_PER_SECOND = (() => {
  try {
    const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim())
    return Number.isFinite(ticks) && ticks > 0 ? ticks : 100
  } catch {
    return 100
  }
})()

/** utime + stime of /proc/<pid>/stat (of one thread's, /proc/<pid>/task/<thread>/stat, with `thread`), in milliseconds. */
export async function processCpuMs(pid: number, thread?: number): Promise<number> {
  const stat = await readFile(thread === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${thread}/stat`, 'utf8')
  // The command name may hold spaces; the fields after its closing parenthesis are fixed.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND
}

/** `syscw` of /proc/<pid>/io: how many write system calls the process has made. */
export async function processWrites(pid: number): Promise<number> {
  const io = await readFile(`/proc/${pid}/io`, 'utf8')
  const match = /^syscw: (\d+)$/m.exec(io)
  return match?.[1] === undefined ? Number.NaN : Number(match[1])
}
