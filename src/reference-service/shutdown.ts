/**
 * What a stop has: the parts before the database share this much, so that the database always
 * gets its own bounded stop (4.5 s, embedded-postgres/stop-server.ts), and the whole fits in the
 * contract's 10 s.
 */
export const PARTS_BEFORE_DATABASE_MS = 3000

/** One part of a running service, as the stop sees it. */
export interface Part {
  /** For the log: `the API`, `the pool`… */
  name: string
  stop: () => Promise<void>
  /** The last resort, for a part that runs processes: SIGKILL, synchronously. */
  kill?: () => void
  /** Left by a service that died; a start that fails leaves it as it found it. */
  adopted?: boolean
  /** The embedded database: its stop bounds itself, and nothing before it may use up its time. */
  database?: boolean
}

/**
 * The parts a service started, stopped in reverse order. A part that does not stop within its
 * share (a pool waiting for a connection held by a request, a relay finishing its batch) is let
 * go, and SIGKILLed if it runs a process, so the database's stop always gets its turn; a stop
 * that left the provider or the database running is never the last word.
 */
export function createStopList(warn: (line: string) => void): {
  push: (part: Part) => void
  stopAll: (options?: { failedStart?: boolean }) => Promise<void>
  /** SIGKILLs, synchronously, every process-running part whose stop has not finished. */
  kill: () => void
} {
  const parts: Part[] = []
  const running = new Set<Part>()
  return {
    push: (part) => {
      parts.push(part)
      if (part.kill) running.add(part)
    },
    stopAll: async (options = {}) => {
      const partsBy = Date.now() + PARTS_BEFORE_DATABASE_MS
      let atDatabase = false
      for (const part of parts.splice(0).reverse()) {
        if (options.failedStart === true && part.adopted === true) {
          running.delete(part)
          continue
        }
        atDatabase ||= part.database === true
        try {
          if (await within(part.stop(), atDatabase ? undefined : partsBy - Date.now())) {
            running.delete(part)
            continue
          }
          warn(`while stopping: ${part.name} did not stop in time; going on`)
        } catch (error) {
          warn(`while stopping ${part.name}: ${String(error)}`)
        }
        part.kill?.()
      }
    },
    kill: () => {
      for (const part of running) part.kill?.()
    },
  }
}

/** Whether `work` settled within `timeoutMs` (no bound when undefined); it runs on either way. */
async function within(work: Promise<void>, timeoutMs: number | undefined): Promise<boolean> {
  if (timeoutMs === undefined) return work.then(() => true)
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), Math.max(0, timeoutMs))))
  try {
    return await Promise.race([work.then(() => true), late])
  } finally {
    clearTimeout(timer)
  }
}
