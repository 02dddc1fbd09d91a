/**
 * What the client remembers about one logical operation: the key minted for it and the
 * fingerprint of the request it was minted for.
 */
export interface OperationRecord {
  /** The caller's name for the operation, such as `order-42:charge`. */
  readonly operationId: string
  /** The `Idempotency-Key` every attempt of this operation carries. */
  readonly key: string
  /** SHA-256 (hex) of method, URL and canonical body; see `fingerprintOperation`. */
  readonly fingerprint: string
  readonly createdAt: Date
  /** When a final response was received; `null` while the operation is unfinished. */
  readonly finishedAt: Date | null
  /** The final response's status; `null` while unfinished. */
  readonly finalStatus: number | null
  /** When `prune` may delete the record; `null` while unfinished (kept until finished). */
  readonly expiresAt: Date | null
}

/**
 * Where the client keeps operation keys. Implement it to keep keys elsewhere; oncely ships
 * `memoryKeyStore`, `fileKeyStore` and `postgresKeyStore`.
 *
 * @example
 * ```ts
 * import type { KeyStore, OperationRecord } from 'oncely/client'
 * const records = new Map<string, OperationRecord>()
 * const store: KeyStore = {
 *   async claim(record) {
 *     const existing = records.get(record.operationId)
 *     if (existing) return existing
 *     records.set(record.operationId, record)
 *     return record
 *   },
 *   async finish(operationId, outcome) {
 *     const existing = records.get(operationId)
 *     if (existing) records.set(operationId, { ...existing, ...outcome })
 *   },
 *   async prune(now = new Date()) {
 *     let pruned = 0
 *     for (const [id, r] of records) if (r.expiresAt && r.expiresAt <= now && records.delete(id)) pruned++
 *     return pruned
 *   },
 * }
 * ```
 */
export interface KeyStore {
  /**
   * Returns the record already kept for `candidate.operationId`, or keeps `candidate` and
   * returns it. It must be atomic (concurrent claims for one operation, from any process the
   * store is shared with, all return the same record) and durable: when the promise resolves,
   * the record survives a crash of this process.
   */
  claim(candidate: OperationRecord): Promise<OperationRecord>
  /** Records the final response; the record may be pruned after `outcome.expiresAt`. */
  finish(operationId: string, outcome: OperationOutcome): Promise<void>
  /** Deletes finished records whose `expiresAt` is at or before `now`; returns how many. */
  prune(now?: Date): Promise<number>
}

export interface OperationOutcome {
  readonly finishedAt: Date
  readonly finalStatus: number
  readonly expiresAt: Date
}
