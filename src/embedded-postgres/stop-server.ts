import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { runningServer, signal, waitForExit } from './running-server.js'

/**
 * How long each step of a stop may take. Together (4.5 s) they leave the rest of the service's
 * 10 s to the API and the provider, on a loaded machine too.
 */
export const STOP_STEPS = Object.freeze({
  /** Fast shutdown: clients disconnected, open transactions rolled back, a shutdown checkpoint. */
  fastMs: 2500,
  /** Immediate shutdown: no checkpoint; the next start recovers from the WAL, committed data kept. */
  immediateMs: 1000,
  /** After SIGKILL, for the kernel to take the processes away. */
  killMs: 1000,
})

/**
 * Stops the PostgreSQL running on `dataDir` (its postmaster named by `postmaster.pid`), surely:
 * fast shutdown, then immediate shutdown, each bounded, then SIGKILL of the postmaster and of
 * every process it started. These are the signals `pg_ctl stop -m fast` and `-m immediate` send
 * (SIGINT, SIGQUIT); sent from here they need no extra process on a loaded machine, and work as
 * root, where pg_ctl refuses to run. Open connections, idle transactions and running queries do
 * not hold a fast shutdown: the server ends them. Resolves true once the postmaster is gone.
 */
export async function stopServer(dataDir: string, steps: { fastMs: number; immediateMs: number; killMs: number } = STOP_STEPS): Promise<boolean> {
  const pid = runningServer(dataDir)?.pid
  if (pid === undefined || !signal(pid, 'SIGINT')) return true
  if (await waitForExit(pid, steps.fastMs)) return true
  signal(pid, 'SIGQUIT')
  if (await waitForExit(pid, steps.immediateMs)) return true
  killServer(dataDir)
  return waitForExit(pid, steps.killMs)
}

/**
 * SIGKILLs the PostgreSQL running on `dataDir`, its postmaster and its children, at once and
 * synchronously: the last resort of a stop, and of a process about to exit. The pid comes from
 * `postmaster.pid`, which a stopped server removes, so a pid reused since is never signalled.
 * The children must go too: each backend leaves the postmaster's process group, a busy one does
 * not notice its postmaster's death, and one left attached to the shared memory would stop the
 * next start. The postmaster is stopped first so that it forks nothing between listing and kill.
 */
export function killServer(dataDir: string): void {
  const pid = runningServer(dataDir)?.pid
  if (pid === undefined || !signal(pid, 'SIGSTOP')) return
  for (const child of childrenOf(pid)) signal(child, 'SIGKILL')
  signal(pid, 'SIGKILL')
}

/** The processes whose parent is `pid`: from /proc on Linux, from `ps` elsewhere. */
export function childrenOf(pid: number): number[] {
  let table: Array<[pid: number, ppid: number]>
  try {
    table = readdirSync('/proc')
      .filter((name) => /^\d+$/.test(name))
      .flatMap((name): Array<[number, number]> => {
        try {
          // The fields after the parenthesised command name (which may hold spaces): state, ppid.
          const stat = readFileSync(`/proc/${name}/stat`, 'utf8')
          return [[Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])]]
        } catch {
          return []
        }
      })
  } catch {
    table = execFileSync('ps', ['-A', '-o', 'pid=,ppid='], { encoding: 'utf8' })
      .split('\n')
      .map((line) => line.trim().split(/\s+/).map(Number) as [number, number])
  }
  return table.filter(([, parent]) => parent === pid).map(([child]) => child)
}
