import type { IncomingMessage } from 'node:http'
import type { Context, Env, MiddlewareHandler } from 'hono'
import { bodyLimit } from 'hono/body-limit'

/**
 * Hono's body limit, without its cost on the common case. `bodyLimit` asks `c.req.raw.body`
 * first, and under `@hono/node-server` that one property builds the whole web `Request` (undici,
 * a `ReadableStream` over the socket, an `AbortController`): about a twentieth of the API's CPU
 * per charge (issue 21). A body with a `Content-Length` and no `Transfer-Encoding` is judged by
 * Node's own headers instead, as `bodyLimit` would judge it; anything else (chunked, or no Node
 * message underneath) goes through `bodyLimit`, which counts the bytes as they arrive.
 */
export function bodyLimitByLength<E extends Env>(maxSize: number, onError: (c: Context<E>) => Response | Promise<Response>): MiddlewareHandler<E> {
  const counting = bodyLimit({ maxSize, onError: onError as (c: Context) => Response | Promise<Response> }) as unknown as MiddlewareHandler<E>
  return async (c, next) => {
    const headers = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.headers
    const length = headers?.['content-length']
    if (length === undefined || headers?.['transfer-encoding'] !== undefined) return counting(c, next)
    // Node's parser refuses a Content-Length that is not one decimal number, so this parses.
    if (Number.parseInt(length, 10) > maxSize) return onError(c)
    await next()
  }
}
