import { randomUUID } from 'node:crypto'
import type { Handler } from 'hono'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { ProviderUnavailableError } from '../provider-client.js'
import { chargeFrom, declined, providerMetadata, providerUnavailable } from '../responses.js'
import { insertCharge } from '../sql.js'
import { answerFromRow, completeKey, INSERT_KEY, outcomeOf, readRequest, record, SELECT_KEY, type NaiveRow } from './naive.js'

/**
 * BROKEN ON PURPOSE (the article's first design; never for production). One transaction: lock
 * the key row with SELECT … FOR UPDATE, insert it if there is none, call the provider, store
 * the response, COMMIT. When there is no row yet there is nothing to lock: two concurrent
 * requests both insert, the second blocks on the unique index until the first commits, then
 * fails with a unique violation, which surfaces as a 500.
 */
export function selectForUpdateRoute(deps: ServiceDeps): Handler<ServiceEnv> {
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
      const { rows } = await client.query<NaiveRow>({ text: `${SELECT_KEY} FOR UPDATE`, values: [userId, request.key] })
      const row = rows[0]
      if (row) {
        await client.query({ text: 'COMMIT' })
        response = answerFromRow(row, request.hash)
      } else {
        const claimId = randomUUID()
        await client.query({ text: INSERT_KEY, values: [userId, request.key, claimId, request.hash] })
        deps.chaos.crashAt('after-claim', crashPoint)
        const result = await deps.provider.createCharge({ ...input, metadata: providerMetadata(userId, request.key, claimId) }, `${userId}:${claimId}`)
        deps.chaos.crashAt('after-provider', crashPoint)
        if (result.outcome === 'declined') {
          response = await completeKey(client, userId, request.key, declined(result))
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
        response = providerUnavailable(error.status, error.message)
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
