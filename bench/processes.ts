import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { waitForReadyLine, type ChildExit } from '../src/cli/ready-line.js'

const CLI = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url))

/** A process of the benchmark: its URL, its pid (for its CPU time) and how to stop it. */
export interface BenchProcess {
  readonly url: string
  readonly pid: number
  /** User + system CPU time the process has used so far, in milliseconds (from /proc). */
  cpuMs(): Promise<number>
  stop(): Promise<void>
}

/** Runs `oncely <args>` from the current source, as its own process, until its ready line. */
export async function startCli(args: string[], env: Record<string, string> = {}, nodeOptions: string[] = []): Promise<BenchProcess> {
  const child: ChildProcessWithoutNullStreams = spawn(process.execPath, [...nodeOptions, '--import', 'tsx', CLI, ...args], {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
  const exited = new Promise<ChildExit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  const url = await waitForReadyLine(child, { output: () => output, exited, timeoutMs: 60_000, describe: () => `oncely ${args.join(' ')}\n${output}` })
  const pid = child.pid ?? 0
  return {
    url,
    pid,
    cpuMs: () => processCpuMs(pid),
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
      await exited
      clearTimeout(timer)
    },
  }
}

/** utime + stime of /proc/<pid>/stat, in clock ticks of 10 ms (USER_HZ is 100 on Linux). */
export async function processCpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
  // The command name may hold spaces; the fields after its closing parenthesis are fixed.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) * 10
}
