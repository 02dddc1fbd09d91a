import type { KeyStore, OperationOutcome, OperationRecord } from './key-store.js'

/**
 * A key store in this process's memory: keys survive retries, not a restart. The client's
 * default; use `fileKeyStore` or `postgresKeyStore` when a crash must not lose a key.
 *
 * @example
 * ```ts
 * import { createClient, memoryKeyStore } from 'oncely/client'
 * const client = createClient({ baseUrl: 'http://127.0.0.1:3000', keyStore: memoryKeyStore() })
 * ```
 */
export function memoryKeyStore(): KeyStore {
  const records = new Map<string, OperationRecord>()
  return {
    async claim(candidate) {
      const existing = records.get(candidate.operationId)
      if (existing) return existing
      records.set(candidate.operationId, candidate)
      return candidate
    },
    async finish(operationId: string, outcome: OperationOutcome) {
      const existing = records.get(operationId)
      if (existing) records.set(operationId, { ...existing, ...outcome })
    },
    async prune(now = new Date()) {
      let pruned = 0
      for (const [operationId, record] of records) {
        if (record.expiresAt !== null && record.expiresAt <= now) {
          records.delete(operationId)
          pruned++
        }
      }
      return pruned
    },
  }
}
