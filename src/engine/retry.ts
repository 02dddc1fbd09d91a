import { jitteredBackoffMs } from '../backoff.js'
import { OncelyError } from '../errors.js'

/** Backoff between attempts: capped and jittered, so retries from many workers spread out. */
export const RETRY_BASE_MS = 25
export const RETRY_CAP_MS = 1000

/** Full jitter: a random delay up to min(cap, base · 2^attempt). */
export function backoffMs(attempt: number): number {
  return jitteredBackoffMs({ baseMs: RETRY_BASE_MS, maxMs: RETRY_CAP_MS }, attempt, 'full')
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/**
 * Runs `attempt` until it settles without a transient error, backing off between tries, and gives
 * up with `ONCELY_STORE_UNAVAILABLE` (the last error as its cause) when the next try would start
 * after `deadline` (a `performance.now()` time, read at each try so that it may move). Any other
 * error passes through at once. `onTransient` learns of each transient failure: an error can hide
 * a commit, so the caller knows to recognise its own write afterwards. `what` names the attempt in
 * that error; as a function it is called only then, so a label is not built for every request.
 */
export async function retryTransient<T>(
  what: string | (() => string),
  isTransient: (error: unknown) => boolean,
  deadline: () => number,
  attempt: () => Promise<T>,
  onTransient: (error: unknown) => void = () => undefined,
): Promise<T> {
  for (let tries = 0; ; tries++) {
    try {
      return await attempt()
    } catch (error) {
      if (!isTransient(error)) throw error
      onTransient(error)
      const delay = backoffMs(tries)
      if (performance.now() + delay >= deadline()) {
        throw new OncelyError('ONCELY_STORE_UNAVAILABLE', `${typeof what === 'function' ? what() : what}: the database stayed unavailable (${describeError(error)})`, { cause: error })
      }
      await sleep(delay)
    }
  }
}

/** A short description of an error for logs and the row's recorded outcome error. */
export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code
    return typeof code === 'string' ? `${code}: ${error.message}` : error.message
  }
  return String(error)
}
