import type { Context } from 'hono'
import { fingerprintRequest, parseIdempotencyKey } from '../../index.js'
import type { RequestOutcome } from '../../ops/index.js'
import type { Queryable } from '../../store/postgres/index.js'
import type { ServiceDeps, ServiceEnv } from '../context.js'
import { problem, REFUSED_BEFORE_ANY_CLAIM } from '../problem.js'
import { SERVICE_SCHEMA } from '../sql.js'
import { CHARGES_ROUTE } from '../operations.js'

/**
 * What the two broken strategies share: the naive key table, written the way the article's
 * careful developer writes it. Never used by the default strategy.
 */
export interface NaiveRow {
  claim_id: string
  request_hash: string
  status: string
  response_status: number | null
  response_body: string | null
}

export const SELECT_KEY = `SELECT claim_id::text, request_hash, status, response_status, response_body
  FROM ${SERVICE_SCHEMA}.naive_idempotency_key WHERE user_id = $1 AND key = $2`

export const INSERT_KEY = `INSERT INTO ${SERVICE_SCHEMA}.naive_idempotency_key (user_id, key, claim_id, request_hash, status)
  VALUES ($1, $2, $3, $4, 'in_progress')`

export const COMPLETE_KEY = `UPDATE ${SERVICE_SCHEMA}.naive_idempotency_key
  SET status = 'completed', response_status = $3, response_body = $4 WHERE user_id = $1 AND key = $2`

/** The request's key and fingerprint, or the 400 to answer. */
export function readRequest(c: Context<ServiceEnv>, deps: ServiceDeps): { key: string; hash: string } | Response {
  const parsed = parseIdempotencyKey(c.req.header('idempotency-key'))
  if (!parsed.ok) {
    record(deps, 'invalid', 400, performance.now())
    return problem({ type: 'idempotency-key-invalid', title: 'Idempotency-Key invalid', status: 400, detail: parsed.reason, ...REFUSED_BEFORE_ANY_CLAIM })
  }
  const hash = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: c.get('chargeBody') })
  // oncely's own route feeds the repeated-payload detector from its outcome events; these two
  // have no guard, so they give it the fingerprint they computed anyway.
  deps.metrics.observePayload({ scope: c.get('userId'), key: parsed.key, fingerprint: hash, route: CHARGES_ROUTE })
  return { key: parsed.key, hash }
}

/** Answers from an existing row: 422 on another payload, the stored response, or 409 while it runs. */
export function answerFromRow(row: NaiveRow, hash: string): Response {
  if (row.request_hash !== hash) {
    return problem({ type: 'idempotency-key-reused', title: 'Idempotency-Key reused', status: 422, detail: 'this Idempotency-Key was already used with a different request', retry_same_key: false, new_key_safe: false, operation_state: row.status === 'completed' ? 'completed' : 'running' })
  }
  if (row.status !== 'completed' || row.response_status === null || row.response_body === null) {
    return problem({ type: 'idempotency-key-in-use', title: 'Idempotency-Key in use', status: 409, detail: 'a request with this Idempotency-Key is still being processed', retry_same_key: true, new_key_safe: false, operation_state: 'running' }, { 'retry-after': '1' })
  }
  return new Response(row.response_body, {
    status: row.response_status,
    headers: { 'content-type': row.response_status < 300 ? 'application/json' : 'application/problem+json', 'idempotent-replayed': 'true' },
  })
}

/** Stores the response on the key row, in the request's transaction. */
export async function completeKey(tx: Queryable, userId: string, key: string, response: Response): Promise<Response> {
  const body = await response.text()
  await tx.query({ text: COMPLETE_KEY, values: [userId, key, response.status, body] })
  return new Response(body, { status: response.status, headers: response.headers })
}

export function record(deps: ServiceDeps, outcome: RequestOutcome, status: number, startedAt: number): void {
  deps.metrics.onOutcome({ outcome, status, durationMs: performance.now() - startedAt })
}

export function outcomeOf(response: Response): RequestOutcome {
  if (response.headers.get('idempotent-replayed') === 'true') return 'replayed'
  if (response.status === 409) return 'conflict'
  if (response.status === 422) return 'mismatch'
  return response.status < 400 ? 'created' : 'failed'
}
