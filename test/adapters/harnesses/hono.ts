import { Hono } from 'hono'
import { stream } from 'hono/streaming'
import type { ContentfulStatusCode } from 'hono/utils/http-status'
import { idempotency, type IdempotencyEnv } from '../../../src/adapters/hono.js'
import type { Queryable } from '../../../src/store/postgres/index.js'
import { frameworkOptions, requestBody, requestHeaders, type AdapterHarness } from '../harness.js'

export const honoHarness: AdapterHarness = {
  name: 'hono',
  async start(options, routes) {
    const once = idempotency<Queryable>(frameworkOptions(options, (c) => c.req.header('authorization')))
    const app = new Hono<IdempotencyEnv<Queryable>>()
    app.onError((_error, c) => c.text('Internal Server Error', 500))
    for (const route of routes) {
      app.on(route.method, route.path, once, async (c) => {
        const type = c.req.header('content-type') ?? ''
        const hasBody = c.req.raw.body !== null
        const body: unknown = !hasBody ? undefined : type.includes('json') ? await c.req.json() : new Uint8Array(await c.req.arrayBuffer())
        const output = await route.handler({ body, params: c.req.param(), idempotency: c.get('idempotency') })
        for (const [name, value] of Object.entries(output.headers ?? {})) c.header(name, value)
        c.status(output.status as ContentfulStatusCode)
        if ('stream' in output && output.streamError !== undefined) {
          const { stream: pieces, streamError } = output
          let next = 0
          const encoder = new TextEncoder()
          // A web stream that fails once its chunks were read, as a broken upstream body does.
          return c.body(
            new ReadableStream<Uint8Array>({
              pull: (controller) => (next < pieces.length ? controller.enqueue(encoder.encode(pieces[next++])) : controller.error(new Error(streamError))),
            }),
          )
        }
        if ('stream' in output) {
          return stream(c, async (s) => {
            for (const chunk of output.stream) await s.write(chunk)
          })
        }
        if (output.body === undefined) return c.body(null)
        return c.body(typeof output.body === 'string' ? output.body : new Uint8Array(output.body))
      })
    }
    return {
      async request(request) {
        const body = requestBody(request)
        const response = await app.request(request.path, {
          method: request.method,
          headers: requestHeaders(request),
          ...(body === undefined ? {} : { body }),
          ...(request.signal === undefined ? {} : { signal: request.signal }),
        })
        return { status: response.status, headers: response.headers, body: Buffer.from(await response.arrayBuffer()) }
      },
      async close() {},
    }
  },
}
