import type { Handler } from 'hono'
import type { PoolClientLike } from '../../store/postgres/index.js'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { ProviderUnavailableError } from '../provider-client.js'
import { chargeFrom, declined, providerMetadata, providerUnavailable } from '../responses.js'
import { insertCharge } from '../sql.js'
import { completeKey, outcomeOf, readRequest, record } from './naive.js'

/** What a broken strategy's claim decided, inside the request's open transaction. */
export type NaiveClaim = { claimed: true; claimId: string } | { claimed: false; response: Response }

/**
 * The request flow both broken strategies share, as the article's careful developer writes it:
 * one transaction holding the claim, the provider call and the stored response, committed at the
 * end. Only how the claim is taken differs between them (`claim`).
 */
export function naiveRoute(
  deps: ServiceDeps,
  claim: (client: PoolClientLike, userId: string, request: { key: string; hash: string }) => Promise<NaiveClaim>,
): Handler<ServiceEnv> {
  return async (c) => {
    const startedAt = performance.now()
    const request = readRequest(c, deps)
    if (request instanceof Response) return request
    const userId = c.get('userId')
    const input = c.get('charge')
    const crashPoint = c.get('crashPoint')
    const client = await deps.pool.connect()
    let response: Response
    try {
      await client.query({ text: 'BEGIN' })
      const claimed = await claim(client, userId, request)
      if (!claimed.claimed) {
        await client.query({ text: 'COMMIT' })
        response = claimed.response
      } else {
        deps.chaos.crashAt('after-claim', crashPoint)
        const metadata = providerMetadata(userId, request.key, claimed.claimId)
        const result = await deps.provider.createCharge({ ...input, metadata }, `${userId}:${claimed.claimId}`)
        deps.chaos.crashAt('after-provider', crashPoint)
        if (result.outcome === 'declined') {
          response = await completeKey(client, userId, request.key, declined(result, 'completed'))
        } else {
          const charge = chargeFrom(input, result)
          await insertCharge(client, userId, request.key, charge)
          response = await completeKey(client, userId, request.key, c.json(charge, 201))
        }
        await client.query({ text: 'COMMIT' })
      }
    } catch (error) {
      await client.query({ text: 'ROLLBACK' }).catch(() => {})
      if (error instanceof ProviderUnavailableError) {
        // The claim rolled back with the transaction: the key holds nothing, though the provider may have charged.
        response = providerUnavailable(error.status, error.message, 'none')
      } else {
        record(deps, 'failed', 500, startedAt)
        throw error
      }
    } finally {
      client.release()
    }
    record(deps, outcomeOf(response), response.status, startedAt)
    return response
  }
}
