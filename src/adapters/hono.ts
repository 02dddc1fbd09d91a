import type { Context, Env, MiddlewareHandler } from 'hono'
import { matchedRoutes } from 'hono/route'
import type { HttpAnswer } from './answers.js'
import { isJsonContentType } from './body.js'
import { beginGuarded, signalAborted, isGuarded, keyTtlHeaders, resolveAdapterOptions, type AdapterOptions, type IdempotencyContext } from './http.js'
import { passThroughWeb, StreamRecorder } from './streamed-body.js'

export { PROBLEM_TYPES } from './answers.js'
export type { AdapterOptions, CompletionWork, IdempotencyContext, OperationState, OutcomeEvent } from './http.js'

/** The Hono environment the middleware adds: `c.get('idempotency')` on a request that owns its key. */
export interface IdempotencyEnv<Tx = unknown> {
  Variables: { idempotency: IdempotencyContext<Tx> | undefined }
}

/**
 * Hono middleware: a guarded request (`methods`, `routes`) needs an `Idempotency-Key`; a repeat
 * gets the stored response, a concurrent one 409, a different payload 422. The response is read
 * from `c.res` after the handler; a streamed one is passed through and stored when it ends within
 * `maxStoredBodyBytes` (docs/adapters.md).
 *
 * @example
 * ```ts
 * import { Hono } from 'hono'
 * import { idempotency, type IdempotencyEnv } from 'oncely/hono'
 * const app = new Hono<IdempotencyEnv>()
 * app.post('/v1/charges', idempotency({ engine, scope: (c) => c.req.header('x-user-id') }), async (c) => {
 *   const body = await c.req.json()
 *   const charge = await c.get('idempotency')!.execution.step('charge', ({ providerKey }) => provider.charge(body, providerKey))
 *   return c.json(charge, 201)
 * })
 * ```
 */
export function idempotency<Tx = unknown, E extends Env = Env>(
  options: AdapterOptions<Context<E & IdempotencyEnv<Tx>, string>, Tx>,
): MiddlewareHandler<E & IdempotencyEnv<Tx>> {
  const resolved = resolveAdapterOptions(options)
  return async function oncelyIdempotency(c, next) {
    const { route, params } = handlerRoute(c)
    if (!isGuarded(resolved, c.req.method, route)) return next()
    const gate = await beginGuarded(resolved, c, {
      method: c.req.method,
      route,
      params,
      query: c.req.queries(),
      body: await readBody(c),
      mediaType: requestHeader(c, 'content-type'),
      key: requestHeader(c, 'idempotency-key'),
      clientGone: signalAborted(() => c.req.raw.signal),
    })
    if (gate.kind === 'answer') return toResponse(gate.answer)
    const ttl = keyTtlHeaders(resolved.keyTtlSeconds)
    if (gate.kind === 'unkeyed') {
      await next()
      advertise(c, ttl)
      return void gate.finish(c.res.status)
    }
    c.set('idempotency', gate.guard.context)
    const produced = recordBodies(c)
    try {
      await next()
    } finally {
      produced.restore()
    }
    if (c.error) {
      await gate.guard.settle({ kind: 'thrown', error: c.error })
      return
    }
    const res = c.res
    if ((produced.streamed || isStreaming(res)) && res.body !== null) {
      // Issue 23: passed through as it comes, copied for the record on the way (docs/adapters.md).
      const recorder = new StreamRecorder(gate.guard, resolved.log, res.status, res.headers.entries(), resolved.maxStoredBodyBytes)
      const passed = await passThroughWeb(res.body, recorder)
      if (!passed.ok) {
        // Failed before its first chunk: the client got nothing, so it ends the claim like a throw.
        await gate.guard.settle({ kind: 'thrown', error: passed.error })
        throw passed.error
      }
      const headers = new Headers(res.headers)
      for (const [name, value] of ttl) headers.set(name, value)
      return replace(c, new Response(passed.stream, { status: res.status, statusText: res.statusText, headers }))
    }
    // The body the handler gave Hono, when `c.res` is still the response made of it: reading it
    // back with `arrayBuffer()` would build a web Response around it (issue 21).
    const given = produced.bodyOf(res)
    let body: Uint8Array
    try {
      body = given === undefined ? new Uint8Array(await res.arrayBuffer()) : typeof given === 'string' ? Buffer.from(given) : given
    } catch (error) {
      // Issue 8 path 4: a body that errors while it is read ends the claim like a throw, so its
      // lease stops and a retry may run; Hono's error handler answers.
      await gate.guard.settle({ kind: 'thrown', error })
      throw error
    }
    const replacement = await gate.guard.settle({ kind: 'response', status: res.status, headers: res.headers.entries(), body })
    if (replacement) return replace(c, replacement)
    if (given !== undefined && setHeaders(res.headers, ttl)) return
    const headers = new Headers(res.headers)
    for (const [name, value] of ttl) headers.set(name, value)
    replace(c, new Response(body, { status: res.status, statusText: res.statusText, headers }))
  }
}

type Maker = (data: unknown, ...rest: unknown[]) => Response

/**
 * What the handler answered through `c`, while it runs: whether it streamed, and each response's
 * body as given. Nothing of it is a closure made per request and stored on an object: V8's young
 * collections kept such a closure, and so `c` and the whole request it reached, until the next
 * full collection (a getter of an object literal did the same), so every request was promoted to
 * the old generation (issue 21). The wrappers put on `c` are bound functions instead.
 */
class RecordedBodies {
  streamed = false
  readonly #bodies = new WeakMap<Response, string | Uint8Array>()
  readonly #c: Context
  readonly #made: Pick<Context, 'body' | 'newResponse' | 'text' | 'json'>

  constructor(c: Context) {
    this.#c = c
    this.#made = { body: c.body, newResponse: c.newResponse, text: c.text, json: c.json }
  }

  /** The body `response` was made of, when the handler gave it as a string or bytes. */
  bodyOf(response: Response): string | Uint8Array | undefined {
    return this.#bodies.get(response)
  }

  /** Puts Hono's own makers back on `c`. */
  restore(): void {
    Object.assign(this.#c, this.#made)
  }

  keep(data: unknown, response: Response): Response {
    if (data instanceof ReadableStream) this.streamed = true
    else if (typeof data === 'string' || data instanceof Uint8Array) this.#bodies.set(response, data)
    return response
  }

  /** Hono's own `c.body`, which `c.json` is made through so the text is seen. */
  get bodyMaker(): Maker {
    return this.#made.body as Maker
  }
}

function recordMade(this: RecordedBodies, maker: Maker, data: unknown, ...rest: unknown[]): Response {
  return this.keep(data, maker(data, ...rest))
}

function recordJson(this: RecordedBodies, object: unknown, arg?: unknown, headers?: Record<string, string | string[]>): Response {
  const data = JSON.stringify(object)
  return this.keep(data, this.bodyMaker(data, arg, { 'Content-Type': 'application/json', ...headers }))
}

/**
 * Wraps `c.body`, `c.newResponse`, `c.text` and `c.json` for the handler's run: a stream given to
 * them marks the response streamed, and a string or byte body is kept beside the response made
 * of it. `c.json` is Hono's own, `#newResponse(JSON.stringify(object), arg, { 'Content-Type':
 * 'application/json', ...headers })`, made through `c.body` so the text is seen. Bound, like
 * Hono's own arrow functions, so a handler may take them off `c`.
 */
function recordBodies(c: Context): RecordedBodies {
  const recorded = new RecordedBodies(c)
  c.body = recordMade.bind(recorded, c.body as Maker) as never
  c.newResponse = recordMade.bind(recorded, c.newResponse as Maker) as never
  c.text = recordMade.bind(recorded, c.text as Maker) as never
  c.json = recordJson.bind(recorded) as never
  return recorded
}

/** Sets the pairs on headers that may be changed; false for immutable ones (a fetched response's), changing nothing. */
function setHeaders(headers: Headers, pairs: ReadonlyArray<readonly [string, string]>): boolean {
  try {
    for (const [name, value] of pairs) headers.set(name, value)
    return true
  } catch (error) {
    if (error instanceof TypeError) return false
    throw error
  }
}

/** Adds the key TTL header to an unguarded handler's response, copying it when its headers are immutable (a fetched response). */
function advertise(c: Context, pairs: ReadonlyArray<readonly [string, string]>): void {
  if (pairs.length === 0) return
  const headers = new Headers(c.res.headers)
  for (const [name, value] of pairs) headers.set(name, value)
  replace(c, new Response(c.res.body, { status: c.res.status, statusText: c.res.statusText, headers }))
}

/** Sets `c.res` without merging the headers of the response it replaces. */
function replace(c: Context, response: Response | HttpAnswer | null): void {
  if (response === null) return
  c.res = undefined
  c.res = response instanceof Response ? response : toResponse(response)
}

function toResponse(answer: HttpAnswer): Response {
  // A plain record where no name repeats: `@hono/node-server` writes it as it is, where a web
  // `Headers` would be built and then read back into a record (issue 21: a replay's answer).
  const record: Record<string, string> = {}
  for (const [name, value] of answer.headers) {
    const lower = name.toLowerCase()
    if (lower in record) return new Response(answer.body.byteLength === 0 ? null : answer.body, { status: answer.status, headers: answer.headers.map(([n, v]) => [n, v]) })
    record[lower] = value
  }
  return new Response(answer.body.byteLength === 0 ? null : answer.body, { status: answer.status, headers: record })
}

/**
 * A request header, as `c.req.header(name)` gives it, without the web `Headers` that
 * `@hono/node-server` builds from every raw header on the first `c.req.header()` (issue 21): on
 * Node its value comes from Node's own parsed headers (repeated ones joined with ", ", as
 * `Headers` does; Node keeps only the first of a repeated `content-type` or `authorization`, as it
 * does for the request itself). Elsewhere, or once a middleware has replaced `c.req.raw`, it is
 * `c.req.header(name)`.
 *
 * @example
 * ```ts
 * import { requestHeader } from 'oncely/hono'
 * app.use(async (c, next) => (requestHeader(c, 'authorization') ? next() : c.text('sign in', 401)))
 * ```
 */
export function requestHeader(c: { readonly env: unknown; readonly req: { readonly raw: object; header(name: string): string | undefined } }, name: string): string | undefined {
  const incoming = (c.env as { incoming?: { headers?: Record<string, string | string[] | undefined> } } | undefined)?.incoming
  const headers = incoming?.headers
  if (incoming === undefined || headers === undefined || typeof headers !== 'object' || !isRequestOf(c.req.raw, incoming)) return c.req.header(name)
  const value = headers[name.toLowerCase()]
  return Array.isArray(value) ? value.join(', ') : value
}

/**
 * Whether `raw` is still the request `@hono/node-server` made from `incoming` (it keeps
 * `incoming` under a symbol of its own): a middleware that replaced `c.req.raw`, say to change
 * its headers, must be read through it, not around it.
 */
function isRequestOf(raw: object, incoming: object): boolean {
  // Asked for every header a request reads (nine per charge in the reference service): the
  // answer is kept on the request object itself, not found again among its symbols each time
  // (issue 21). Not in a module-wide WeakMap: V8's young collections keep such a map's values
  // until a full one, and this value, Node's request, reached the whole request.
  const known = (raw as { [madeFromKey]?: object | null })[madeFromKey]
  if (known !== undefined) return known === incoming
  let madeFrom: object | null = null
  for (const symbol of Object.getOwnPropertySymbols(raw)) {
    if ((raw as Record<symbol, unknown>)[symbol] === incoming) madeFrom = incoming
  }
  // A request object that takes no new properties (frozen by a middleware) is looked up each time.
  if (Object.isExtensible(raw)) Object.defineProperty(raw, madeFromKey, { value: madeFrom, configurable: true })
  return madeFrom === incoming
}

/** The node:http request a request object was made from (`null`: none), once looked up, under this symbol on the object. */
const madeFromKey = Symbol('oncely.madeFrom')

function isStreaming(res: Response): boolean {
  return res.headers.get('transfer-encoding')?.toLowerCase().includes('chunked') === true || res.headers.get('content-type')?.startsWith('text/event-stream') === true
}

/** The pattern and params of the route that will answer (the last matched non-middleware route). */
function handlerRoute(c: Context): { route: string; params: Record<string, string> } {
  const routes = matchedRoutes(c)
  let index = routes.length - 1
  while (index > 0 && routes[index]?.method === 'ALL') index--
  const route = routes[index]
  if (!route || route.path === '*' || route.path === '/*') return { route: c.req.path, params: {} }
  const current = c.req.routeIndex
  c.req.routeIndex = index
  try {
    return { route: route.path, params: c.req.param() }
  } finally {
    c.req.routeIndex = current
  }
}

async function readBody(c: Context): Promise<unknown> {
  // A body an earlier middleware read is in Hono's cache: asking the raw request whether it has
  // one would build a web Request around it on @hono/node-server (issue 21).
  const read = Object.keys(c.req.bodyCache).length > 0
  if (!read && c.req.raw.body === null) return undefined
  const type = requestHeader(c, 'content-type') ?? ''
  if (isJsonContentType(type)) {
    const text = await c.req.text()
    if (read && text === '' && c.req.raw.body === null) return undefined
    try {
      return JSON.parse(text) as unknown
    } catch {
      return new Uint8Array(Buffer.from(text))
    }
  }
  return new Uint8Array(await c.req.arrayBuffer())
}
