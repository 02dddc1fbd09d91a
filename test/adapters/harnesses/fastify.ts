import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import Fastify, { type FastifyRequest } from 'fastify'
import { oncelyFastify } from '../../../src/adapters/fastify.js'
import { fetchFrom, frameworkOptions, requestBody, requestHeaders, type AdapterHarness } from '../harness.js'

export const fastifyHarness: AdapterHarness = {
  name: 'fastify',
  async start(options, routes) {
    const app = Fastify({ bodyLimit: 4 * 1024 * 1024 })
    app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
    await app.register(oncelyFastify, frameworkOptions<FastifyRequest>(options, (request) => request.headers.authorization))
    for (const route of routes) {
      app.route({
        method: route.method,
        url: route.path,
        handler: async (request, reply) => {
          const output = await route.handler({
            body: request.body,
            params: request.params as Record<string, string>,
            idempotency: request.idempotency ?? undefined,
          })
          reply.code(output.status).headers(output.headers ?? {})
          if ('stream' in output) return reply.send(Readable.from(chunks(output.stream, output.streamError)))
          return reply.send(output.body === undefined ? undefined : typeof output.body === 'string' ? output.body : Buffer.from(output.body))
        },
      })
    }
    try {
      await app.ready()
    } catch (error) {
      await app.close()
      throw error
    }
    let port: Promise<number> | undefined
    return {
      async request(request) {
        // inject() has no connection for a client to close: a request that may be aborted goes over real HTTP.
        if (request.signal !== undefined) {
          port ??= app.listen({ port: 0, host: '127.0.0.1' }).then(() => (app.server.address() as AddressInfo).port)
          return fetchFrom(await port, request)
        }
        const body = requestBody(request)
        const response = await app.inject({
          method: request.method as 'POST',
          url: request.path,
          headers: requestHeaders(request),
          ...(body === undefined ? {} : { payload: body }),
        })
        const headers = new Headers()
        for (const [name, value] of Object.entries(response.headers)) {
          if (value === undefined) continue
          for (const item of Array.isArray(value) ? value : [value]) headers.append(name, String(item))
        }
        return { status: response.statusCode, headers, body: response.rawPayload }
      },
      async close() {
        if (port !== undefined) app.server.closeAllConnections()
        await app.close()
      },
    }
  },
}

/** The chunks, then the error when one is given: thrown only once the chunks were read. */
async function* chunks(stream: readonly string[], error: string | undefined): AsyncGenerator<string> {
  for (const chunk of stream) yield chunk
  if (error !== undefined) throw new Error(error)
}
