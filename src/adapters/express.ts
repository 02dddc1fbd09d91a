import type { NextFunction, Request, RequestHandler, Response } from 'express'
import { requestHasBody } from './body.js'
import { captureServerResponse, sendAnswer, setKeyTtl } from './capture-server-response.js'
import { withDictionaryPropertiesWhenSwapped } from './dictionary-properties.js'
import { routePattern } from './express-route.js'
import { beginGuarded, responseClosed, isGuarded, resolveAdapterOptions, type AdapterOptions, type IdempotencyContext, type RegisteredTx } from './http.js'

export { PROBLEM_TYPES } from './answers.js'
export type { AdapterOptions, CompletionWork, IdempotencyContext, IdempotencyRegister, OutcomeEvent } from './http.js'

declare module 'express-serve-static-core' {
  interface Request {
    /**
     * Set by oncely's `idempotency()` on a request that owns its key; `undefined` elsewhere. Its
     * `tx` is the type registered in `IdempotencyRegister` (docs/adapters.md).
     */
    idempotency?: IdempotencyContext<RegisteredTx>
  }
}

/**
 * Express 5 middleware: a guarded request (`methods`, `routes`) needs an `Idempotency-Key`; a
 * repeat gets the stored response, a concurrent one 409, a different payload 422. Mount it on
 * the route, after the body parser, so it sees the route pattern, its params and `req.body`.
 *
 * @example
 * ```ts
 * import express from 'express'
 * import { idempotency } from 'oncely/express'
 * const app = express()
 * const once = idempotency({ engine, scope: (req) => req.get('x-user-id') })
 * app.post('/v1/charges', express.json(), once, async (req, res) => {
 *   const charge = await req.idempotency!.execution.step('charge', ({ providerKey }) => provider.charge(req.body, providerKey))
 *   res.status(201).json(charge)
 * })
 * ```
 */
export function idempotency<Tx extends RegisteredTx = RegisteredTx>(options: AdapterOptions<Request, Tx>): RequestHandler {
  const resolved = resolveAdapterOptions(options)
  return async function oncelyIdempotency(req: Request, res: Response, next: NextFunction): Promise<void> {
    const route = routePattern(req)
    if (!isGuarded(resolved, req.method, route)) return next()
    // Express swapped both objects' prototypes: what the guard and node:http add to them from
    // here on is added cheaply once that is dealt with (issue 21).
    withDictionaryPropertiesWhenSwapped(req, res)
    const gate = await beginGuarded(resolved, req, {
      method: req.method,
      route,
      params: req.params as Record<string, string>,
      query: req.query,
      body: req.body as unknown,
      bodyNotRead: req.body === undefined && requestHasBody(req.headers),
      mediaType: req.headers['content-type'],
      key: req.headers['idempotency-key'],
      clientGone: responseClosed(res),
    })
    if (gate.kind === 'answer') return sendAnswer(res, gate.answer)
    setKeyTtl(res, resolved.keyTtlSeconds)
    if (gate.kind === 'unkeyed') {
      res.once('close', () => gate.finish(res.statusCode))
      return next()
    }
    req.idempotency = gate.guard.context
    captureServerResponse(res, gate.guard, resolved.log)
    next()
  }
}
