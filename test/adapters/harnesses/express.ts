import { createServer } from 'node:http'
import express from 'express'
import { idempotency } from '../../../src/adapters/express.js'
import { frameworkOptions, serveOnFreePort, type AdapterHarness } from '../harness.js'

export const expressHarness: AdapterHarness = {
  name: 'express',
  async start(options, routes) {
    const once = idempotency(frameworkOptions<express.Request>(options, (req) => req.headers.authorization))
    const app = express()
    for (const route of routes) {
      const method = route.method.toLowerCase() as 'get' | 'post' | 'patch'
      app[method](route.path, express.json(), express.raw({ type: () => true }), once, async (req, res) => {
        const output = await route.handler({
          body: req.body as unknown,
          params: req.params as Record<string, string>,
          idempotency: req.idempotency,
        })
        res.status(output.status).set(output.headers ?? {})
        if ('stream' in output) {
          for (const chunk of output.stream) res.write(chunk)
          // A piping source that breaks destroys the response (stream.pipeline does).
          if (output.streamError === undefined) res.end()
          else res.destroy(new Error(output.streamError))
        } else if (output.body === undefined) res.end()
        else res.send(typeof output.body === 'string' ? output.body : Buffer.from(output.body))
      })
    }
    return serveOnFreePort(createServer(app))
  },
}
