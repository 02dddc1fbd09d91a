import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import { promisify } from 'node:util'
import { startProcess, type TestProcess } from '../../helpers/processes.js'

const run = promisify(execFile)

/** `npm start` in `dir`, in its own process group (as a terminal would run it), ready. */
export function npmStart(dir: string, env: Record<string, string>): Promise<TestProcess> {
  return startProcess('npm', ['start'], { cwd: dir, detached: true, readyTimeoutMs: 120_000, env })
}

/** `npm start` in `dir` run to its end, for a start that is expected to refuse. */
export function npmStartToEnd(dir: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('npm', ['start'], { cwd: dir, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    child.once('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** What the service said at start: its own pid and those of what it runs, and their ports. */
export interface StartLines {
  servicePid: number
  databasePid: number
  providerPid: number
  databasePort: number
  providerPort: number
}

export function readStartLines(stdout: string): StartLines {
  const number = (pattern: RegExp) => {
    const match = pattern.exec(stdout)
    if (!match?.[1]) throw new Error(`no ${String(pattern)} in the start lines:\n${stdout}`)
    return Number(match[1])
  }
  return {
    servicePid: number(/oncely reference service \([^,]+, pid (\d+)\)/),
    databasePid: number(/embedded PostgreSQL in \S+ \(pid (\d+)/),
    providerPid: number(/fake provider \(pid (\d+)/),
    databasePort: number(/database: postgres:\/\/[^@]+@127\.0\.0\.1:(\d+)\//),
    providerPort: number(/fake provider \(pid \d+[^)]*\) at http:\/\/127\.0\.0\.1:(\d+)/),
  }
}

/** Processes (not zombies) in any of these process groups. */
export async function processesInGroups(groups: readonly number[]): Promise<string[]> {
  const { stdout } = await run('ps', ['-e', '-o', 'pid=,pgid=,stat=,args='])
  return stdout
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter(([pid, pgid, stat]) => pid !== undefined && groups.includes(Number(pgid)) && !stat?.startsWith('Z'))
    .map((fields) => fields.join(' '))
}

/** Whether any of these pids still runs (zombies count as gone). */
export async function alivePids(pids: readonly number[]): Promise<number[]> {
  const { stdout } = await run('ps', ['-e', '-o', 'pid=,stat='])
  const running = new Set(
    stdout
      .split('\n')
      .map((line) => line.trim().split(/\s+/))
      .filter(([, stat]) => stat !== undefined && !stat.startsWith('Z'))
      .map(([pid]) => Number(pid)),
  )
  return pids.filter((pid) => running.has(pid))
}

/** Polls until `check` returns an empty list or `timeoutMs` passes; returns the last list. */
export async function until<T>(check: () => Promise<T[]>, timeoutMs: number): Promise<T[]> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const left = await check()
    if (left.length === 0 || Date.now() > deadline) return left
    // A process this test did not start cannot be awaited: its exit is seen by polling.
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Ports on 127.0.0.1 that something still listens on. */
export async function busyPorts(ports: readonly number[]): Promise<number[]> {
  const busy: number[] = []
  for (const port of ports) {
    const free = await new Promise<boolean>((resolve) => {
      const probe = createServer()
      probe.once('error', () => resolve(false))
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)))
    })
    if (!free) busy.push(port)
  }
  return busy
}

/** Children of `parent` (not zombies): a PostgreSQL's backends and workers, which leave its process group. */
export async function childPids(parent: number): Promise<number[]> {
  const { stdout } = await run('ps', ['-e', '-o', 'pid=,ppid=,stat='])
  return stdout
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter(([, ppid, stat]) => Number(ppid) === parent && stat !== undefined && !stat.startsWith('Z'))
    .map(([pid]) => Number(pid))
}

/** `count` processes spinning on the CPU, the load of other test runs on the machine; `stop()` SIGKILLs them. */
export function cpuBurners(count: number): { stop(): Promise<void> } {
  const burners: ChildProcess[] = Array.from({ length: count }, () => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }))
  return {
    async stop() {
      await Promise.all(
        burners.map(
          (burner) =>
            new Promise<void>((resolve) => {
              if (burner.exitCode !== null || burner.signalCode !== null) return resolve()
              burner.once('exit', () => resolve())
              burner.kill('SIGKILL')
            }),
        ),
      )
    },
  }
}
