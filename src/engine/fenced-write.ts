import { OncelyError } from '../errors.js'
import type { Lease } from './lease.js'
import { retryTransient } from './retry.js'
import type { IdempotencyStore } from './store.js'
import type { ClaimSnapshot } from './types.js'

/** What a claim holder's fenced writes need. */
export interface FencedWriterOptions {
  store: Pick<IdempotencyStore, 'read' | 'isTransientError'>
  scope: string
  key: string
  /** The holder's lease: a write that lands extends it, and no try starts once it may look stale. */
  lease: Lease
  /** The database stayed away past the lease: the holder gives the claim up (Invariant 12). */
  onUnavailable: () => void
}

/**
 * The fenced writes of one claim holder (Invariant 3), each retried while the database is away
 * for as long as the lease allows (issue 8, path 4). A transient error can hide a commit, so a
 * write whose retry finds the fence gone reads the row back to recognise its own landed write.
 * Past the lease the holder stops renewing (`onUnavailable`) and the write throws
 * `ONCELY_STORE_UNAVAILABLE`.
 */
export class FencedWriter {
  readonly #options: FencedWriterOptions

  constructor(options: FencedWriterOptions) {
    this.#options = options
  }

  /**
   * One fenced write. When a later attempt finds the fence gone after a transient error, the row
   * is read back and `recognise` says whether it holds this holder's own write. A write that
   * keeps the fence (a step's commit or mark) needs none: its repeat lands again, so a refused
   * repeat means a take-over.
   */
  async write(what: string, attempt: () => Promise<boolean>, recognise?: (row: ClaimSnapshot | null) => boolean): Promise<boolean> {
    const { lease } = this.#options
    let ambiguous = false
    const ok = await this.retrying(
      what,
      async () => {
        const sentAt = performance.now()
        const result = await attempt()
        if (result) lease.extend(sentAt)
        return result
      },
      () => (ambiguous = true),
    )
    if (ok || !ambiguous || recognise === undefined) return ok
    return recognise(await this.readBack())
  }

  /** The key's row as it is now, read with the same retries. */
  readBack(): Promise<ClaimSnapshot | null> {
    const { store, scope, key } = this.#options
    return this.retrying('reading the key back', () => store.read(scope, key))
  }

  /** Runs `attempt` until it settles without a transient error, within the lease (`retryTransient`). */
  async retrying<T>(what: string, attempt: () => Promise<T>, onTransient?: () => void): Promise<T> {
    const { store, key, lease } = this.#options
    try {
      return await retryTransient(() => `${what} for key ${JSON.stringify(key)}`, (error) => store.isTransientError(error), () => lease.staleAt, attempt, onTransient)
    } catch (error) {
      // Invariant 12: a holder that cannot write its outcome stops renewing, so the claim goes
      // stale and a retry takes it over.
      if (isUnavailable(error)) this.#options.onUnavailable()
      throw error
    }
  }
}

export function isUnavailable(error: unknown): boolean {
  return error instanceof OncelyError && error.code === 'ONCELY_STORE_UNAVAILABLE'
}
