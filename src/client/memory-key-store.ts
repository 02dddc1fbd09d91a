import type { KeyStore, OperationOutcome, OperationRecord } from './key-store.js'

/**
 * A new, empty key store in memory, private to whoever holds it: keys survive retries, not a
 * restart. The client's default is `processKeyStore()`, one shared by the whole process; use
 * `fileKeyStore` or `postgresKeyStore` when a crash must not lose a key.
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

/** One per process, even when two copies of this module are loaded (a bundle and `node_modules`). */
const PROCESS_KEY_STORE = Symbol.for('oncely.client.processKeyStore')

/**
 * The memory key store shared by every client of this process that names no `keyStore`: two
 * clients created for two requests agree on one key per `operationId`. Keys survive retries and
 * calls, not a restart.
 *
 * @example
 * ```ts
 * import { createClient, processKeyStore } from 'oncely/client'
 * const a = createClient({ baseUrl: 'http://127.0.0.1:3000' })
 * const b = createClient({ baseUrl: 'http://127.0.0.1:3000' })
 * // a.options.keyStore === b.options.keyStore === processKeyStore()
 * ```
 */
export function processKeyStore(): KeyStore {
  const holder = globalThis as { [PROCESS_KEY_STORE]?: KeyStore }
  holder[PROCESS_KEY_STORE] ??= memoryKeyStore()
  return holder[PROCESS_KEY_STORE]
}
