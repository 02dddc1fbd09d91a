import { createServer } from 'node:http'
import { withIdempotency } from '../../../src/adapters/node.js'
import type { Queryable } from '../../../src/store/postgres/index.js'
import { frameworkOptions, matchPath, serveOnFreePort, type AdapterHarness, type TestRoute } from '../harness.js'

export const nodeHarness: AdapterHarness = {
  name: 'node:http',
  async start(options, routes) {
    const find = (method: string | undefined, url: string | undefined) => {
      const path = new URL(url ?? '/', 'http://localhost').pathname
      for (const route of routes) {
        const params = route.method === method ? matchPath(route.path, path) : undefined
        if (params) return { route, params }
      }
      return undefined
    }
    const listener = withIdempotency<Queryable>(
      {
        ...frameworkOptions<import('node:http').IncomingMessage>(options, (req) => req.headers.authorization),
        route: (req) => {
          const found = find(req.method, req.url)
          return found ? { pattern: found.route.path, params: found.params } : { pattern: new URL(req.url ?? '/', 'http://localhost').pathname }
        },
      },
      async (req, res, { body, idempotency }) => {
        const found = find(req.method, req.url)
        if (!found) return void res.writeHead(404).end()
        const route: TestRoute = found.route
        const output = await route.handler({ body, params: found.params, idempotency })
        res.writeHead(output.status, output.headers ?? {})
        if ('stream' in output) {
          for (const chunk of output.stream) res.write(chunk)
          // A piping source that breaks destroys the response (stream.pipeline does).
          if (output.streamError === undefined) res.end()
          else res.destroy(new Error(output.streamError))
        } else res.end(output.body)
      },
    )
    return serveOnFreePort(createServer(listener))
  },
}
