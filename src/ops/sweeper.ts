import { publishEngineEvent } from '../engine/events.js'
import { positiveInteger } from '../option-validation.js'

/** What the sweeper needs from a store. */
export interface SweepableStore {
  /** Deletes up to `batchSize` expired completed or failed keys; resolves to how many. */
  sweepExpired(batchSize: number): Promise<number>
}

export interface SweepOptions {
  /** Keys deleted per statement; small, so no batch holds many row locks for long. (Default: 500) */
  batchSize?: number
  /** Stop after this many batches in one call, so a huge backlog is worked off over several runs. (Default: 1000) */
  maxBatches?: number
  /** Pause between batches, to leave the database room for requests. (Default: 0) */
  pauseMs?: number
}

/**
 * Deletes expired completed and failed keys in small batches until none is left or `maxBatches`
 * is reached (Invariant 9). Each batch is one statement that skips rows other transactions hold
 * and checks expiry again on the locked row, so a key being reclaimed is never deleted. A running
 * claim is never deleted, however old (Invariant 11): its steps may be the only record of a real
 * side effect; it is taken over by a retry or settled by the reconciler. Publishes `swept`
 * (`deleted`, `batches`) on `node:diagnostics_channel` once it is done.
 *
 * @example
 * ```ts
 * import { sweepExpiredKeys } from 'oncely/ops'
 * const { deleted } = await sweepExpiredKeys(store, { batchSize: 200 })
 * ```
 */
export async function sweepExpiredKeys(store: SweepableStore, options: SweepOptions = {}): Promise<{ deleted: number; batches: number }> {
  const batchSize = positiveInteger('batchSize', options.batchSize ?? 500)
  const maxBatches = positiveInteger('maxBatches', options.maxBatches ?? 1000)
  const pauseMs = options.pauseMs ?? 0
  let deleted = 0
  let batches = 0
  while (batches < maxBatches) {
    const count = await store.sweepExpired(batchSize)
    batches++
    deleted += count
    if (count < batchSize) break
    if (pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs))
  }
  publishEngineEvent({ event: 'swept', deleted, batches })
  return { deleted, batches }
}
