import type { IncomingMessage } from 'node:http'
import type { Context, Env, MiddlewareHandler } from 'hono'
import { bodyLimit } from 'hono/body-limit'
import { discardRequestBody } from '../adapters/node.js'

/**
 * Hono's body limit, without its cost on the common case. `bodyLimit` asks `c.req.raw.body`
 * first, and under `@hono/node-server` that one property builds the whole web `Request` (undici,
 * a `ReadableStream` over the socket, an `AbortController`): about a twentieth of the API's CPU
 * per charge (issue 21). A body with a `Content-Length` and no `Transfer-Encoding` is judged by
 * Node's own headers instead, as `bodyLimit` would judge it; anything else (chunked, or no Node
 * message underneath) goes through `bodyLimit`, which counts the bytes as they arrive.
 *
 * A refused body is read and dropped (bounded) before the answer goes: a client still sending
 * would otherwise meet a reset and see `fetch failed` instead of the 413. `onError` learns
 * whether that worked; when it did not, the connection cannot carry another request.
 */
export function bodyLimitByLength<E extends Env>(maxSize: number, onError: (c: Context<E>, drained: boolean) => Response | Promise<Response>): MiddlewareHandler<E> {
  // Hono's counting limit stops reading where it refuses, and leaves the rest of the stream to it.
  const counting = bodyLimit({ maxSize, onError: ((c: Context<E>) => onError(c, false)) as (c: Context) => Response | Promise<Response> }) as unknown as MiddlewareHandler<E>
  return async (c, next) => {
    const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming
    const length = incoming?.headers['content-length']
    if (incoming === undefined || length === undefined || incoming.headers['transfer-encoding'] !== undefined) return counting(c, next)
    // Node's parser refuses a Content-Length that is not one decimal number, so this parses.
    if (Number.parseInt(length, 10) > maxSize) return onError(c, await discardRequestBody(incoming))
    await next()
  }
}
