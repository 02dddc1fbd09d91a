import { describe, expect, it } from 'vitest'
import type { KeyStore, OperationRecord } from '../../src/client/index.js'

export function candidate(operationId: string, key: string, fingerprint = 'f'.repeat(64)): OperationRecord {
  return { operationId, key, fingerprint, createdAt: new Date('2025-01-01T00:00:00.000Z'), finishedAt: null, finalStatus: null, expiresAt: null }
}

/**
 * What every key store must do, run against each one (memory, file, PostgreSQL). `newStore`
 * returns a fresh, empty store; `sameStore` another instance over the same storage (another
 * process's view), or the same instance for memory.
 */
export function keyStoreContract(name: string, newStore: () => Promise<{ store: KeyStore; sameStore: () => KeyStore }>): void {
  describe(`${name}: the key store contract`, () => {
    it('keeps the first record for an operation and returns it to later claims', async () => {
      const { store, sameStore } = await newStore()
      const first = await store.claim(candidate('order-42:charge', 'key-1'))
      expect(first).toEqual(candidate('order-42:charge', 'key-1'))
      expect(await store.claim(candidate('order-42:charge', 'key-2', '0'.repeat(64)))).toEqual(first)
      expect(await sameStore().claim(candidate('order-42:charge', 'key-3'))).toEqual(first)
      expect((await store.claim(candidate('order-43:charge', 'key-4'))).key).toBe('key-4')
    })

    it('takes operationIds of any shape', async () => {
      const { store } = await newStore()
      for (const [i, operationId] of ['a/b/../c', 'x:y?z=1', ' spaced ', 'émoji 🚀', "quote ' and \" and \\"].entries()) {
        expect((await store.claim(candidate(operationId, `k${i}`))).operationId).toBe(operationId)
        expect((await store.claim(candidate(operationId, 'other'))).key).toBe(`k${i}`)
      }
    })

    it('finishes a record and prunes it only after it expires; unfinished records stay', async () => {
      const { store, sameStore } = await newStore()
      await store.claim(candidate('done', 'k1'))
      await store.claim(candidate('pending', 'k2'))
      const finishedAt = new Date('2025-01-02T00:00:00.000Z')
      const expiresAt = new Date('2025-01-03T00:00:00.000Z')
      await store.finish('done', { finishedAt, finalStatus: 201, expiresAt })
      expect(await sameStore().claim(candidate('done', 'other'))).toEqual({ ...candidate('done', 'k1'), finishedAt, finalStatus: 201, expiresAt })
      expect(await store.prune(new Date('2025-01-02T12:00:00.000Z'))).toBe(0)
      expect(await sameStore().prune(new Date('2025-01-03T00:00:00.000Z'))).toBe(1)
      expect((await store.claim(candidate('done', 'k3'))).key).toBe('k3')
      expect((await store.claim(candidate('pending', 'other'))).key).toBe('k2')
      expect(await store.prune(new Date('2999-01-01T00:00:00.000Z'))).toBe(0)
    })

    it('finishing an unknown operation changes nothing', async () => {
      const { store } = await newStore()
      await store.finish('never-claimed', { finishedAt: new Date(), finalStatus: 200, expiresAt: new Date() })
      expect((await store.claim(candidate('never-claimed', 'k'))).key).toBe('k')
    })

    it('30 concurrent claims for one operation agree on one key', async () => {
      const { sameStore } = await newStore()
      const records = await Promise.all(Array.from({ length: 30 }, (_, i) => sameStore().claim(candidate('race', `key-${i}`))))
      expect(new Set(records.map((r) => r.key)).size).toBe(1)
    })
  })
}
