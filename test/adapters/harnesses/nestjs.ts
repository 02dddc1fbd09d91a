import { Controller, Get, Module, Patch, Post, Req, Res, UseInterceptors } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import type { NestExpressApplication } from '@nestjs/platform-express'
import express, { type Request, type Response } from 'express'
import { Idempotency, IdempotencyInterceptor, IdempotencyModule, type IdempotencyContext } from '../../../src/adapters/nestjs.js'
import type { Queryable } from '../../../src/store/postgres/index.js'
import { frameworkOptions, serveOnFreePort, type AdapterHarness, type TestRoute } from '../harness.js'

const METHODS = { GET: Get, POST: Post, PATCH: Patch }

/**
 * One controller per route, decorated by calls (the routes are data here; an application writes
 * `@Post(path)`, `@UseInterceptors(IdempotencyInterceptor)` and `@Idempotency()` as decorators).
 */
function controllerFor(route: TestRoute): new () => unknown {
  class RouteController {
    async handle(req: Request, res: Response, idempotency: IdempotencyContext<Queryable> | undefined): Promise<void> {
      const output = await route.handler({ body: req.body as unknown, params: req.params as Record<string, string>, idempotency })
      res.status(output.status).set(output.headers ?? {})
      if ('stream' in output) {
        for (const chunk of output.stream) res.write(chunk)
        // A piping source that breaks destroys the response (stream.pipeline does).
        if (output.streamError === undefined) res.end()
        else res.destroy(new Error(output.streamError))
      } else if (output.body === undefined) res.end()
      else res.send(typeof output.body === 'string' ? output.body : Buffer.from(output.body))
    }
  }
  const prototype = RouteController.prototype
  const descriptor = Object.getOwnPropertyDescriptor(prototype, 'handle') as PropertyDescriptor
  Controller()(RouteController)
  METHODS[route.method](route.path)(prototype, 'handle', descriptor)
  UseInterceptors(IdempotencyInterceptor)(prototype, 'handle', descriptor)
  Req()(prototype, 'handle', 0)
  Res()(prototype, 'handle', 1)
  Idempotency()(prototype, 'handle', 2)
  return RouteController
}

export const nestHarness: AdapterHarness = {
  name: 'nestjs',
  async start(options, routes) {
    const idempotency = IdempotencyModule.forRoot(frameworkOptions<Request>(options, (req) => req.headers.authorization))
    class AppModule {}
    Module({ imports: [idempotency], controllers: routes.map(controllerFor) })(AppModule)
    const app = await NestFactory.create<NestExpressApplication>(AppModule, { logger: false, bodyParser: false })
    app.use(express.json(), express.raw({ type: () => true, limit: '4mb' }))
    await app.init()
    const served = await serveOnFreePort(app.getHttpServer())
    return {
      request: (request) => served.request(request),
      async close() {
        await served.close()
        await app.close()
      },
    }
  },
}
