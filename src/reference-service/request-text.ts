import type { IncomingMessage } from 'node:http'
import type { Context } from 'hono'
import { requestHeader } from '../adapters/hono.js'

/**
 * The request body as text. Under `@hono/node-server`, `c.req.text()` builds a web `Request`
 * around the socket (undici, a web stream and an `AbortController` per request: a tenth of the
 * API's CPU, issue 21); a body whose `Content-Length` the body limit already checked is read from
 * Node's own message instead, and left in Hono's body cache, so `c.req.text()` (the idempotency
 * guard's read) answers from it. A chunked body was read whole by the body limit, which left it
 * in that cache too (`bodyLimitByLength`).
 */
export async function requestText(c: Context): Promise<string> {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming
  if (incoming === undefined || requestHeader(c, 'content-length') === undefined || Object.keys(c.req.bodyCache).length > 0) return c.req.text()
  const text = await new Promise<string>((resolve, reject) => {
    const chunks: Buffer[] = []
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk))
    incoming.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    incoming.once('error', reject)
    incoming.once('aborted', () => reject(new Error('the client aborted the request body')))
  })
  // Hono keeps each read of the body as a promise under its name (`HonoRequest.bodyCache`).
  ;(c.req.bodyCache as Record<string, Promise<string>>).text = Promise.resolve(text)
  return text
}
