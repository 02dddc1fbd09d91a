/** The points of a request at which `CHAOS=1` lets `X-Chaos-Crash` kill the API. */
export const CRASH_POINTS = ['after-claim', 'after-provider', 'after-receipt', 'after-complete'] as const
export type CrashPoint = (typeof CRASH_POINTS)[number]

/** Decides, per request, whether to die at a point; a no-op unless chaos is on. */
export interface Chaos {
  /** Whether `CHAOS=1` is set: without it no request is ever killed, and nothing need look. */
  readonly enabled: boolean
  /** The crash point a request asked for, or undefined. */
  requested(header: string | undefined): CrashPoint | undefined
  /** Kills this process at once, with no cleanup, if `wanted` is `point`. */
  crashAt(point: CrashPoint, wanted: CrashPoint | undefined): void
}

export function createChaos(enabled: boolean): Chaos {
  return {
    enabled,
    requested(header) {
      if (!enabled || header === undefined) return undefined
      const value = header.trim().toLowerCase()
      return (CRASH_POINTS as readonly string[]).includes(value) ? (value as CrashPoint) : undefined
    },
    crashAt(point, wanted) {
      if (!enabled || point !== wanted) return
      // A real crash: no finally blocks, no ROLLBACK, no lease release, no response.
      process.kill(process.pid, 'SIGKILL')
    },
  }
}
