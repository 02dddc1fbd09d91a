import type { IncomingMessage, ServerResponse } from 'node:http'
import { invalid, positiveInteger } from '../option-validation.js'
import { problem, PROBLEM_TYPES } from './answers.js'
import { isJsonContentType } from './body.js'
import { readRequestBody } from './read-body.js'
import { captureServerResponse, sendAnswer, setKeyTtl } from './capture-server-response.js'
import { beginGuarded, responseClosed, isGuarded, resolveAdapterOptions, type AdapterOptions, type IdempotencyContext } from './http.js'

export { PROBLEM_TYPES } from './answers.js'
export { discardRequestBody, type DiscardLimits } from './discard-body.js'
export { readRequestBody, type BoundedBody } from './read-body.js'
export type { AdapterOptions, CompletionWork, IdempotencyContext, OutcomeEvent } from './http.js'

/** A matched route: its pattern and path parameters. */
export interface RouteMatch {
  pattern: string
  params?: Record<string, string>
}

/** Options of `withIdempotency`: the common ones plus body reading and routing. */
export interface NodeAdapterOptions<Tx = unknown> extends AdapterOptions<IncomingMessage, Tx> {
  /** Largest request body read; a larger one gets 413. (Default: 1048576) */
  maxBodyBytes?: number
  /** The route pattern and params of a request, for the fingerprint. (Default: the path, no params) */
  route?: (request: IncomingMessage) => RouteMatch
}

// The body is read before the route is matched: nothing has run. After a fault, nothing is known.
const BEFORE_ANY_CLAIM = Object.freeze({ newKeySafe: true, state: 'none' } as const)
const NOT_KNOWN = Object.freeze({ newKeySafe: false, state: 'unknown' } as const)

/** What the wrapped handler receives besides `req` and `res`. */
export interface NodeHandlerContext<Tx = unknown> {
  /** The parsed JSON body; the raw bytes for another content type; `undefined` when empty. */
  body: unknown
  rawBody: Buffer
  /** Present on a request that owns its key. */
  idempotency: IdempotencyContext<Tx> | undefined
}

export type NodeHandler<Tx> = (req: IncomingMessage, res: ServerResponse, context: NodeHandlerContext<Tx>) => void | Promise<void>

/**
 * Wraps a `node:http` handler: reads the body (bounded), and on a guarded request needs an
 * `Idempotency-Key`; a repeat gets the stored response, a concurrent one 409, a different
 * payload 422. The response is held until its outcome is stored.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http'
 * import { withIdempotency } from 'oncely/node'
 * const server = createServer(withIdempotency({ engine, scope: (req) => req.headers['x-user-id'] as string | undefined }, async (req, res, { body, idempotency }) => {
 *   const charge = await idempotency!.execution.step('charge', ({ providerKey }) => provider.charge(body, providerKey))
 *   res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify(charge))
 * }))
 * ```
 */
export function withIdempotency<Tx = unknown>(options: NodeAdapterOptions<Tx>, handler: NodeHandler<Tx>): (req: IncomingMessage, res: ServerResponse) => void {
  const resolved = resolveAdapterOptions(options)
  const maxBodyBytes = positiveInteger('maxBodyBytes', options.maxBodyBytes ?? 1_048_576)
  if (options.route !== undefined && typeof options.route !== 'function') throw invalid('route', 'must be a function', options.route)
  if (typeof handler !== 'function') throw invalid('handler', 'must be a function', handler)
  const routeOf = options.route ?? ((req: IncomingMessage): RouteMatch => ({ pattern: new URL(req.url ?? '/', 'http://localhost').pathname }))

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const read = await readRequestBody(req, maxBodyBytes)
    if (read.kind === 'too-large') {
      const detail = `the request body exceeds ${maxBodyBytes} bytes`
      // A body left unread (too long, or too slow, to drain) leaves the connection unusable.
      const headers: Array<[string, string]> = read.drained ? [] : [['connection', 'close']]
      return sendAnswer(res, problem({ status: 413, type: PROBLEM_TYPES.bodyTooLarge, title: 'Body too large', detail, retryable: false, advice: BEFORE_ANY_CLAIM, headers }))
    }
    const rawBody = read.bytes
    const body = parseBody(req, rawBody)
    if (body instanceof SyntaxError) return sendAnswer(res, problem({ status: 400, type: PROBLEM_TYPES.invalidJson, title: 'Invalid JSON', detail: body.message, retryable: false, advice: BEFORE_ANY_CLAIM }))
    const url = new URL(req.url ?? '/', 'http://localhost')
    const route = routeOf(req)
    const method = req.method ?? 'GET'
    if (!isGuarded(resolved, method, route.pattern)) return handler(req, res, { body, rawBody, idempotency: undefined })
    const gate = await beginGuarded(resolved, req, {
      method,
      route: route.pattern,
      params: route.params ?? {},
      query: Object.fromEntries([...url.searchParams.keys()].map((name) => [name, url.searchParams.getAll(name)])),
      body,
      mediaType: req.headers['content-type'],
      key: req.headers['idempotency-key'],
      clientGone: responseClosed(res),
    })
    if (gate.kind === 'answer') return sendAnswer(res, gate.answer)
    setKeyTtl(res, resolved.keyTtlSeconds)
    if (gate.kind === 'unkeyed') {
      res.once('close', () => gate.finish(res.statusCode))
      return handler(req, res, { body, rawBody, idempotency: undefined })
    }
    const thrown = captureServerResponse(res, gate.guard, resolved.log)
    try {
      await handler(req, res, { body, rawBody, idempotency: gate.guard.context })
    } catch (error) {
      await thrown(error)
      throw error
    }
  }

  return (req, res) => {
    handle(req, res).catch((error: unknown) => {
      // The path without its query string, which may carry a token; the route option may be what threw.
      resolved.log.error({ route: `${req.method ?? ''} ${(req.url ?? '').split('?')[0] ?? ''}` }, `oncely: the handler failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`)
      if (res.headersSent || res.writableEnded) res.destroy()
      else sendAnswer(res, problem({ status: 500, type: 'about:blank', title: 'Internal Server Error', detail: 'the request could not be processed', retryable: true, advice: NOT_KNOWN }))
    })
  }
}

function parseBody(req: IncomingMessage, raw: Buffer): unknown {
  if (raw.length === 0) return undefined
  if (!isJsonContentType(req.headers['content-type'])) return raw
  try {
    return JSON.parse(raw.toString('utf8')) as unknown
  } catch (error) {
    return error instanceof SyntaxError ? error : new SyntaxError(String(error))
  }
}
