import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { Readable } from 'node:stream'
import type { HttpAnswer } from './answers.js'
import { requestHasBody, toBytes } from './body.js'
import { beginGuarded, responseClosed, headerRecord, isGuarded, keyTtlHeaders, resolveAdapterOptions, type AdapterOptions, type GuardedExecution, type IdempotencyContext, type RegisteredTx } from './http.js'
import { passThroughWeb, StreamRecorder, type StreamLog } from './streamed-body.js'

export { PROBLEM_TYPES } from './answers.js'
export type { AdapterOptions, CompletionWork, IdempotencyContext, IdempotencyRegister, OutcomeEvent } from './http.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** `true` guards this route whatever its method; `false` never guards it. (Default: by the plugin's `methods` and `routes`) */
    idempotency?: boolean
  }
  interface FastifyRequest {
    /**
     * Set by `oncelyFastify` on a request that owns its key; `null` elsewhere. Its `tx` is the
     * type registered in `IdempotencyRegister` (docs/adapters.md).
     */
    idempotency: IdempotencyContext<RegisteredTx> | null
  }
}

/** Options of `oncelyFastify`. */
export type OncelyFastifyOptions<Tx = RegisteredTx> = AdapterOptions<FastifyRequest, Tx>

const plugin: FastifyPluginAsync<OncelyFastifyOptions> = async (fastify, options) => {
  const resolved = resolveAdapterOptions(options)
  // What a request carries between its hooks, on the request itself (decorated, so every request
  // has the slots from the start): not in module-wide WeakMaps, whose values V8's young
  // collections keep until a full one, each with the request it reaches (issue 21).
  const state = (request: FastifyRequest) => request as unknown as RequestState
  fastify.decorateRequest('idempotency', null)
  fastify.decorateRequest(HELD, null)
  fastify.decorateRequest(THREW, null)
  fastify.decorateRequest(UNKEYED, null)

  // preHandler: the body is parsed and the route matched; the handler has not run yet.
  fastify.addHook('preHandler', async (request, reply) => {
    const route = request.routeOptions.url ?? request.url.split('?')[0] ?? '/'
    if (!(request.routeOptions.config.idempotency ?? isGuarded(resolved, request.method, route))) return
    const gate = await beginGuarded(resolved, request, {
      method: request.method,
      route,
      params: request.params as Record<string, string>,
      query: request.query as Record<string, unknown>,
      body: request.body,
      bodyNotRead: request.body === undefined && requestHasBody(request.headers),
      mediaType: request.headers['content-type'],
      key: request.headers['idempotency-key'],
      clientGone: responseClosed(reply.raw),
    })
    if (gate.kind === 'answer') return send(reply, gate.answer)
    for (const [name, value] of keyTtlHeaders(resolved.keyTtlSeconds)) reply.header(name, value)
    if (gate.kind === 'unkeyed') return void (state(request)[UNKEYED] = gate.finish)
    request.idempotency = gate.guard.context
    // Headers set before the handler ran (CORS, request ids) survive a replacement answer.
    state(request)[HELD] = { guard: gate.guard, earlier: new Set(Object.keys(reply.getHeaders())) }
  })

  fastify.addHook('onError', async (request, _reply, error) => {
    state(request)[THREW] = { error }
  })

  fastify.addHook('onSend', async (request, reply, payload) => {
    const carried = state(request)
    const held = carried[HELD]
    if (!held) return payload
    carried[HELD] = null
    const { guard, earlier } = held
    if (carried[THREW]) {
      await guard.settle({ kind: 'thrown', error: carried[THREW].error })
      return payload
    }
    if (isStream(payload)) return passThrough(reply, guard, payload, resolved)
    const body = toBytes(payload)
    const replacement = await guard.settle({ kind: 'response', status: reply.statusCode, headers: Object.entries(reply.getHeaders()), body })
    return replacement ? replace(reply, replacement, earlier) : payload
  })

  // A hijacked reply skips onSend: end the claim anyway, so the lease stops and a retry may run.
  fastify.addHook('onResponse', async (request, reply) => {
    const carried = state(request)
    carried[UNKEYED]?.(reply.statusCode)
    const held = carried[HELD]
    if (!held) return
    carried[HELD] = null
    await held.guard.settle({ kind: 'thrown', error: new Error('the reply was sent without passing through onSend') })
  })
}

/** The request's slots for what its hooks hand on, under symbols of the plugin's own. */
const HELD = Symbol('oncely.held')
const THREW = Symbol('oncely.threw')
const UNKEYED = Symbol('oncely.unkeyed')
interface RequestState {
  /** The claim the handler runs under, and the names of the headers set before it ran. */
  [HELD]: { guard: GuardedExecution<RegisteredTx>; earlier: ReadonlySet<string> } | null
  /** What the handler threw (boxed: a handler may throw `undefined`). */
  [THREW]: { error: unknown } | null
  /** Reports an unguarded request's status once it is sent. */
  [UNKEYED]: ((status: number) => void) | null
}

/**
 * Fastify plugin (`fastify-plugin`, so it applies to the routes of the instance it is
 * registered on): a guarded request needs an `Idempotency-Key`; a repeat gets the stored
 * response, a concurrent one 409, a different payload 422. Opt a route in or out with
 * `config: { idempotency: true | false }`.
 *
 * @example
 * ```ts
 * import Fastify from 'fastify'
 * import { oncelyFastify } from 'oncely/fastify'
 * const app = Fastify()
 * await app.register(oncelyFastify, { engine, scope: (request) => request.headers['x-user-id'] as string | undefined })
 * app.post('/v1/charges', async (request, reply) => {
 *   const charge = await request.idempotency!.execution.step('charge', ({ providerKey }) => provider.charge(request.body, providerKey))
 *   return reply.code(201).send(charge)
 * })
 * ```
 */
export const oncelyFastify = fp(plugin, { fastify: '5.x', name: 'oncely' })

function send(reply: FastifyReply, answer: HttpAnswer): FastifyReply {
  return reply.code(answer.status).headers(headerRecord(answer.headers)).send(Buffer.from(answer.body))
}

/** Replaces the payload in onSend, dropping the headers the handler set. */
function replace(reply: FastifyReply, answer: HttpAnswer | null, earlier: ReadonlySet<string>): Buffer {
  for (const name of Object.keys(reply.getHeaders())) if (!earlier.has(name)) reply.removeHeader(name)
  if (answer === null) return Buffer.alloc(0)
  reply.code(answer.status).headers(headerRecord(answer.headers))
  return Buffer.from(answer.body)
}

type StreamPayload = Readable | ReadableStream | Response

function isStream(payload: unknown): payload is StreamPayload {
  if (typeof payload !== 'object' || payload === null) return false
  return typeof (payload as { pipe?: unknown }).pipe === 'function' || payload instanceof ReadableStream || payload instanceof Response
}

/**
 * A stream payload, passed through to the client and copied for the record (issue 23): a web
 * stream Fastify sends as it reads it. A `Response` brings its own status and headers, which
 * Fastify applies after this hook. A stream that fails before its first chunk throws, and
 * Fastify's error handler answers, as for a handler that threw.
 */
async function passThrough(reply: FastifyReply, guard: GuardedExecution<RegisteredTx>, payload: StreamPayload, resolved: { readonly log: StreamLog }): Promise<ReadableStream | Response> {
  const response = payload instanceof Response ? payload : undefined
  const status = response?.status ?? reply.statusCode
  const headers = [...Object.entries(reply.getHeaders()), ...(response === undefined ? [] : response.headers.entries())]
  const source = response === undefined ? (payload instanceof ReadableStream ? payload : Readable.toWeb(payload as Readable)) : (response.body ?? new ReadableStream({ start: (controller) => controller.close() }))
  const passed = await passThroughWeb(source as ReadableStream<unknown>, new StreamRecorder(guard, resolved.log, status, headers, guard.maxStoredBodyBytes))
  if (!passed.ok) {
    await guard.settle({ kind: 'thrown', error: passed.error })
    throw passed.error
  }
  return response === undefined ? passed.stream : new Response(passed.stream, { status, statusText: response.statusText, headers: response.headers })
}
