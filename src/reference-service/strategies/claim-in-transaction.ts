import { randomUUID } from 'node:crypto'
import type { Handler } from 'hono'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { answerFromRow, INSERT_KEY, SELECT_KEY, type NaiveRow } from './naive.js'
import { naiveRoute } from './naive-route.js'

/**
 * BROKEN ON PURPOSE (the article's second design; never for production). The claim is an
 * INSERT … ON CONFLICT DO NOTHING, right, but inside the request's transaction, with the
 * provider call, committed only at the end. A crash between the provider call and the commit
 * rolls the claim back with everything else: the retry finds no record, claims afresh with a
 * new provider key, and the customer is charged twice.
 */
export function claimInTransactionRoute(deps: ServiceDeps): Handler<ServiceEnv> {
  return naiveRoute(deps, async (client, userId, request) => {
    const claimId = randomUUID()
    const inserted = await client.query({ text: `${INSERT_KEY} ON CONFLICT DO NOTHING`, values: [userId, request.key, claimId, request.hash] })
    if (inserted.rowCount === 1) return { claimed: true, claimId }
    // The insert waited for the other transaction to end; its row is committed now.
    const { rows } = await client.query<NaiveRow>({ text: SELECT_KEY, values: [userId, request.key] })
    // No row: the other transaction rolled back; the key is free again, so try later.
    const row = rows[0] ?? { claim_id: claimId, request_hash: request.hash, status: 'in_progress', response_status: null, response_body: null }
    return { claimed: false, response: answerFromRow(row, request.hash) }
  })
}
