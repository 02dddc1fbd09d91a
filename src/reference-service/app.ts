import { Hono, type MiddlewareHandler } from 'hono'
import { routePath } from 'hono/route'
import { isOncelyError, logKey } from '../index.js'
import { requestHeader } from '../adapters/hono.js'
import { isTransientPgError, sqlState, type PoolLike } from '../store/postgres/index.js'
import { userFromAuthorization } from './auth.js'
import { bodyLimitByLength } from './body-limit.js'
import { parseChargeInput } from './charge-input.js'
import type { ServiceDeps, ServiceEnv } from './context.js'
import { OUTCOME_NOT_KNOWN, problem, REFUSED_BEFORE_ANY_CLAIM } from './problem.js'
import { requestText } from './request-text.js'
import { CHARGE_ID } from './responses.js'
import { chargeView, SELECT_CHARGE, type ChargeRow } from './sql.js'
import { chargeRoute } from './strategies.js'

/** Bodies above this are refused with 413 before anything is read into memory. */
export const MAX_BODY_BYTES = 64 * 1024

/** Connection failures of the database: the service answers 503, never 500. */
const CONNECTION_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN'])

/** The reference payments API (docs/reference-service.md). */
export function createServiceApp(deps: ServiceDeps): Hono<ServiceEnv> {
  const app = new Hono<ServiceEnv>()

  app.onError(async (error, c) => {
    if (isOncelyError(error, 'ONCELY_LOCK_LOST')) {
      return problem({ type: 'idempotency-key-in-use', title: 'Idempotency-Key in use', status: 409, detail: 'another request took this operation over; retry later', retry_same_key: true, new_key_safe: false, operation_state: 'running' }, { 'retry-after': '1' })
    }
    const key = requestHeader(c, 'idempotency-key')
    const fields = requestFields(c.req.method, routePath(c), c.get('userId'), key, error)
    // The engine's messages quote the key: logged, it is its hash.
    const text = (value: string) => (key === undefined || key === '' ? value : value.replaceAll(JSON.stringify(key), logKey(key)))
    if (await isUnavailable(error, deps.pool)) {
      deps.log.warn(fields, text(`database unavailable: ${String(error)}`))
      return problem({ type: 'service-unavailable', title: 'Service unavailable', status: 503, detail: 'the database did not answer; retry with the same Idempotency-Key', ...OUTCOME_NOT_KNOWN }, { 'retry-after': '1' })
    }
    deps.log.error(fields, text(`internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`))
    return problem({ type: 'internal-error', title: 'Internal Server Error', status: 500, detail: 'the request failed unexpectedly', ...OUTCOME_NOT_KNOWN })
  })
  app.notFound((c) => problem({ type: 'not-found', title: 'Not Found', status: 404, detail: `no route for ${c.req.method} ${c.req.path}`, ...REFUSED_BEFORE_ANY_CLAIM }))

  app.get('/healthz', async (c) => {
    try {
      await deps.pool.query({ text: 'SELECT 1' })
      return c.json({ status: 'ok' })
    } catch {
      return c.json({ status: 'unavailable', detail: 'the database does not answer' }, 503)
    }
  })
  app.get('/metrics', async (c) => c.body(await deps.metrics.registry.metrics(), 200, { 'content-type': deps.metrics.registry.contentType }))

  app.use('/v1/*', async (c, next) => {
    const userId = userFromAuthorization(requestHeader(c, 'authorization'))
    if (userId === undefined) {
      if (c.req.method === 'POST') deps.metrics.onOutcome({ outcome: 'invalid', status: 401, durationMs: 0 })
      return problem({ type: 'unauthenticated', title: 'Unauthenticated', status: 401, detail: 'send Authorization: Bearer demo_<userId>, userId a positive integer', ...REFUSED_BEFORE_ANY_CLAIM }, { 'www-authenticate': 'Bearer' })
    }
    c.set('userId', userId)
    c.set('crashPoint', deps.chaos.requested(requestHeader(c, 'x-chaos-crash')))
    await next()
  })

  const limit = bodyLimitByLength<ServiceEnv>(MAX_BODY_BYTES, (_c, drained) => {
    deps.metrics.onOutcome({ outcome: 'invalid', status: 413, durationMs: 0 })
    // A body left unread leaves the connection unable to carry another request.
    return problem({ type: 'body-too-large', title: 'Payload Too Large', status: 413, detail: `the body is larger than ${MAX_BODY_BYTES} bytes`, ...REFUSED_BEFORE_ANY_CLAIM }, drained ? {} : { connection: 'close' })
  })

  const validate: MiddlewareHandler<ServiceEnv> = async (c, next) => {
    const parsed = parseChargeInput(await requestText(c))
    if (!parsed.ok) {
      deps.metrics.onOutcome({ outcome: 'invalid', status: 400, durationMs: 0 })
      return problem({ type: 'invalid-request', title: 'Invalid request', status: 400, detail: parsed.detail, ...REFUSED_BEFORE_ANY_CLAIM })
    }
    // The body is JSON whatever its Content-Type said, so the fingerprint must read it as JSON:
    // `{"a":1,"b":2}` and `{ "b": 2, "a": 1 }` are one payload (Invariant 5).
    if (!/^application\/([\w.+-]*\+)?json/i.test(requestHeader(c, 'content-type') ?? '')) {
      const headers = new Headers(c.req.raw.headers)
      headers.set('content-type', 'application/json')
      c.req.raw = new Request(c.req.raw.url, { method: c.req.method, headers, body: await c.req.text() })
    }
    c.set('charge', parsed.input)
    c.set('chargeBody', parsed.body)
    await next()
  }

  app.post('/v1/charges', limit, validate, ...chargeRoute(deps))

  app.get('/v1/charges/:id', async (c) => {
    const id = c.req.param('id')
    const notFound = () => problem({ type: 'not-found', title: 'Not Found', status: 404, detail: `no charge ${JSON.stringify(id)}`, ...REFUSED_BEFORE_ANY_CLAIM })
    if (!CHARGE_ID.test(id)) return notFound()
    const { rows } = await deps.pool.query<ChargeRow>({ text: SELECT_CHARGE, values: [id, c.get('userId')] })
    const row = rows[0]
    return row ? c.json(chargeView(row)) : notFound()
  })

  // A known path with another method is 405 with `Allow` (RFC 9110 §15.5.6), not a 404 that
  // would tell a client the resource is missing. Registered last, so the routes above win.
  for (const [path, allow] of [['/v1/charges', 'POST'], ['/v1/charges/:id', 'GET, HEAD'], ['/healthz', 'GET, HEAD'], ['/metrics', 'GET, HEAD']] as const) {
    app.all(path, (c) => problem({ type: 'method-not-allowed', title: 'Method Not Allowed', status: 405, detail: `${c.req.method} is not allowed on ${c.req.path}; use ${allow}`, ...REFUSED_BEFORE_ANY_CLAIM }, { allow }))
  }

  return app
}

/**
 * A fault of the database's availability, not of the request: a transient SQLSTATE, a
 * connection-class one (08xxx), a socket error, or, for errors that carry no code (the pool's
 * connect timeout, a connection ended mid-query), a database that does not answer right now.
 */
async function isUnavailable(error: unknown, pool: PoolLike): Promise<boolean> {
  if (isTransientPgError(error)) return true
  const state = sqlState(error)
  if (state !== undefined) return state.startsWith('08')
  const code = (error as { code?: unknown } | undefined)?.code
  if (typeof code === 'string' && CONNECTION_ERRORS.has(code)) return true
  // The engine gave up retrying a database that stayed away (a step's commit, say): still the database's fault.
  if (isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')) return true
  if (isOncelyError(error)) return false
  try {
    await pool.query({ text: 'SELECT 1' })
    return false
  } catch {
    return true
  }
}

/** The fields of a log line about a request: never a header but the key, and that hashed. */
function requestFields(method: string, route: string, userId: string | undefined, key: string | undefined, error: unknown): Record<string, string> {
  const code = isOncelyError(error) ? error.code : sqlState(error)
  return {
    route: `${method} ${route}`,
    ...(userId === undefined ? {} : { scope: userId }),
    ...(key === undefined ? {} : { key: logKey(key) }),
    ...(code === undefined ? {} : { code }),
  }
}
