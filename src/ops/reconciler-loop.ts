import { positiveInteger } from '../option-validation.js'
import { resolveLogger } from '../logger.js'
import { reconcileStuckClaims, resolveReconcileOptions, type ReconcileOptions, type ReconcileReport } from './reconciler.js'

export interface ReconcilerLoop {
  /** Runs once now, unless a run is already going (then waits for that one). */
  runOnce(): Promise<ReconcileReport[]>
  /** Stops the timer and waits for a run in progress. */
  stop(): Promise<void>
}

/**
 * Runs `reconcileStuckClaims` every `intervalMs` in this process (one run at a time; a failed
 * run is logged and the next one tries again). The timer never keeps the process alive.
 *
 * @example
 * ```ts
 * import { startReconciler } from 'oncely/ops'
 * const reconciler = startReconciler({ engine, database: { pool }, hook: async () => {}, intervalMs: 90_000 })
 * await reconciler.stop()
 * ```
 */
export function startReconciler<Tx>(options: ReconcileOptions<Tx> & { intervalMs?: number }): ReconcilerLoop {
  const resolved = resolveReconcileOptions(options)
  const intervalMs = positiveInteger('intervalMs', options.intervalMs ?? Math.floor(resolved.olderThanMs / 2))
  const log = resolveLogger(options.log)
  let running: Promise<ReconcileReport[]> | undefined
  const runOnce = (): Promise<ReconcileReport[]> => {
    running ??= reconcileStuckClaims(options).finally(() => (running = undefined))
    return running
  }
  const timer = setInterval(() => {
    runOnce().catch((error: unknown) => log.error({ error: String(error) }, 'reconciler run failed; the next run tries again'))
  }, intervalMs)
  timer.unref()
  return {
    runOnce,
    async stop() {
      clearInterval(timer)
      await running?.catch(() => undefined)
    },
  }
}
