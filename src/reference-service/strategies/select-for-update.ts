import { randomUUID } from 'node:crypto'
import type { Handler } from 'hono'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { answerFromRow, INSERT_KEY, SELECT_KEY, type NaiveRow } from './naive.js'
import { naiveRoute } from './naive-route.js'

/**
 * BROKEN ON PURPOSE (the article's first design; never for production). One transaction: lock
 * the key row with SELECT … FOR UPDATE, insert it if there is none, call the provider, store
 * the response, COMMIT. When there is no row yet there is nothing to lock: two concurrent
 * requests both insert, the second blocks on the unique index until the first commits, then
 * fails with a unique violation, which surfaces as a 500.
 */
export function selectForUpdateRoute(deps: ServiceDeps): Handler<ServiceEnv> {
  return naiveRoute(deps, async (client, userId, request) => {
    const { rows } = await client.query<NaiveRow>({ text: `${SELECT_KEY} FOR UPDATE`, values: [userId, request.key] })
    const row = rows[0]
    if (row) return { claimed: false, response: answerFromRow(row, request.hash) }
    const claimId = randomUUID()
    await client.query({ text: INSERT_KEY, values: [userId, request.key, claimId, request.hash] })
    return { claimed: true, claimId }
  })
}
