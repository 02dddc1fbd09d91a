import { readFileSync } from 'node:fs'
import path from 'node:path'

/**
 * The PostgreSQL running on `dataDir`, read from its `postmaster.pid` (line 1 the pid, line 4 the
 * port), if that process is alive. PostgreSQL itself keeps this file true while it runs.
 */
export function runningServer(dataDir: string): { pid: number; port: number } | undefined {
  let text: string
  try {
    text = readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8')
  } catch {
    return undefined
  }
  const lines = text.split('\n')
  const pid = Number(lines[0])
  const port = Number(lines[3])
  if (!Number.isSafeInteger(pid) || pid <= 0 || !Number.isSafeInteger(port) || port <= 0) return undefined
  return isAlive(pid) ? { pid, port } : undefined
}

/** Sends `name` to `pid`; false when there is no such process (or it is not ours to signal). */
export function signal(pid: number, name: NodeJS.Signals): boolean {
  try {
    process.kill(pid, name)
    return true
  } catch {
    return false
  }
}

/** Whether `pid` runs. A zombie (exited, not yet reaped by an init that may never reap it) does not. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
  try {
    // Linux: the state follows the parenthesised command name in /proc/PID/stat.
    return !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return true
  }
}

/** Resolves true once `pid` is gone, false after `timeoutMs`. */
export async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  // Polling is the only portable way to wait for a process this one did not start.
  while (isAlive(pid)) {
    if (Date.now() > deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return true
}
