import type { IncomingMessage } from 'node:http'
import type { Context, Env, MiddlewareHandler } from 'hono'
import { bodyLimit } from 'hono/body-limit'
import { discardRequestBody, readRequestBody } from '../adapters/node.js'

const utf8 = new TextDecoder()

/**
 * Hono's body limit, without its cost on the common case. `bodyLimit` asks `c.req.raw.body`
 * first, and under `@hono/node-server` that one property builds the whole web `Request` (undici,
 * a `ReadableStream` over the socket, an `AbortController`): about a twentieth of the API's CPU
 * per charge (issue 21). A body with a `Content-Length` and no `Transfer-Encoding` is judged by
 * Node's own headers instead, as `bodyLimit` would judge it; a chunked one is read from Node's
 * message, counted as it arrives, and left in Hono's body cache for the handler's reads. Only
 * without a Node message underneath does `bodyLimit` count it.
 *
 * A refused body is read and dropped (bounded) before the answer goes: a client still sending
 * would otherwise meet a reset and see `fetch failed` instead of the 413 (Hono's own limit stops
 * reading where it refuses). `onError` learns whether that worked; when it did not, the
 * connection cannot carry another request.
 */
export function bodyLimitByLength<E extends Env>(maxSize: number, onError: (c: Context<E>, drained: boolean) => Response | Promise<Response>): MiddlewareHandler<E> {
  const counting = bodyLimit({ maxSize, onError: ((c: Context<E>) => onError(c, false)) as (c: Context) => Response | Promise<Response> }) as unknown as MiddlewareHandler<E>
  return async (c, next) => {
    const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming
    if (incoming === undefined) return counting(c, next)
    if (incoming.headers['transfer-encoding'] !== undefined) {
      const body = await readRequestBody(incoming, maxSize)
      if (body.kind === 'too-large') return onError(c, body.drained)
      // Hono keeps each read of the body as a promise under its name (`HonoRequest.bodyCache`):
      // `c.req.text()` and `c.req.arrayBuffer()` answer from these, never from the socket.
      const { bytes } = body
      Object.assign(c.req.bodyCache, { arrayBuffer: Promise.resolve(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)), text: Promise.resolve(utf8.decode(bytes)) })
      return next()
    }
    const length = incoming.headers['content-length']
    if (length === undefined) return counting(c, next)
    // Node's parser refuses a Content-Length that is not one decimal number, so this parses.
    if (Number.parseInt(length, 10) > maxSize) return onError(c, await discardRequestBody(incoming))
    await next()
  }
}
