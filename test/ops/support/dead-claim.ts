import { randomUUID } from 'node:crypto'
import type { ClaimState } from '../../../src/index.js'
import type { TestDatabase } from '../../helpers/db.js'
import { ageClaim, engineOn } from '../../helpers/engine.js'

/**
 * A claim whose owner is gone: made by the store's claim statement (so no lease timer renews
 * it), optionally with a committed step or suspended, then aged an hour (unless `fresh`).
 */
export async function deadClaim(
  db: TestDatabase,
  options: { scope: string; key: string; fingerprint: string; step?: string; suspend?: boolean; fresh?: boolean },
): Promise<ClaimState> {
  const { store } = engineOn(db)
  const { scope, key, fingerprint } = options
  const attempt = await store.claim({ scope, key, fingerprint, ttlMs: 86_400_000, claimId: randomUUID(), fenceToken: randomUUID() })
  if (attempt.kind !== 'inserted') throw new Error(`expected a new claim on ${key}, found one`)
  const fence = { scope, key, fenceToken: attempt.claim.fenceToken }
  if (options.step) await store.commitStep(fence, options.step, { id: 'ch_step' })
  if (options.suspend) await store.suspend(fence)
  if (!options.fresh) await ageClaim(db, scope, key)
  return attempt.claim
}
