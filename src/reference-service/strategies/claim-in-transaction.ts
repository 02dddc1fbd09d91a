import { randomUUID } from 'node:crypto'
import type { Handler } from 'hono'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { ProviderUnavailableError } from '../provider-client.js'
import { chargeFrom, declined, providerMetadata, providerUnavailable } from '../responses.js'
import { insertCharge } from '../sql.js'
import { answerFromRow, completeKey, INSERT_KEY, outcomeOf, readRequest, record, SELECT_KEY, type NaiveRow } from './naive.js'

/**
 * BROKEN ON PURPOSE (the article's second design; never for production). The claim is an
 * INSERT … ON CONFLICT DO NOTHING, right, but inside the request's transaction, with the
 * provider call, committed only at the end. A crash between the provider call and the commit
 * rolls the claim back with everything else: the retry finds no record, claims afresh with a
 * new provider key, and the customer is charged twice.
 */
export function claimInTransactionRoute(deps: ServiceDeps): Handler<ServiceEnv> {
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
      const claimId = randomUUID()
      const inserted = await client.query({ text: `${INSERT_KEY} ON CONFLICT DO NOTHING`, values: [userId, request.key, claimId, request.hash] })
      if (inserted.rowCount !== 1) {
        // The insert waited for the other transaction to end; its row is committed now.
        const { rows } = await client.query<NaiveRow>({ text: SELECT_KEY, values: [userId, request.key] })
        await client.query({ text: 'COMMIT' })
        const row = rows[0]
        // No row: the other transaction rolled back; the key is free again, so try later.
        response = answerFromRow(row ?? { claim_id: claimId, request_hash: request.hash, status: 'in_progress', response_status: null, response_body: null }, request.hash)
      } else {
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
