import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { serve } from '@hono/node-server'
import { Controller, Module, Post, Req, Res, UseInterceptors } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import type { NestExpressApplication } from '@nestjs/platform-express'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { idempotency as expressIdempotency } from '../../../src/adapters/express.js'
import { oncelyFastify } from '../../../src/adapters/fastify.js'
import { idempotency as honoIdempotency } from '../../../src/adapters/hono.js'
import { IdempotencyInterceptor, IdempotencyModule } from '../../../src/adapters/nestjs.js'
import { withIdempotency } from '../../../src/adapters/node.js'
import type { Engine } from '../../../src/engine/engine.js'
import type { Queryable } from '../../../src/store/postgres/index.js'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'
import { burstGate } from './burst-gate.js'
import type { ProbeServer } from './probe-server.js'

/** A guarded `POST /v1/charges` on a real port of 127.0.0.1. */
export interface Target {
  readonly url: string
  /** Requests that reached the server, by the kit's check id. */
  readonly arrivals: ReadonlyMap<string, number>
  close(): Promise<void>
}

type Started = Omit<Target, 'arrivals'>

export const FRAMEWORKS = ['express', 'fastify', 'hono', 'node:http', 'nestjs'] as const
export type Framework = (typeof FRAMEWORKS)[number]

const scope = (authorization: string | undefined) => /^Bearer demo_([1-9]\d*)$/.exec(authorization ?? '')?.[1]

interface Charge {
  status: number
  body: string
}

/** The route's work, the same in every framework: count the execution, then answer. */
function chargeHandler(probe: ProbeServer, gate: (headers: IncomingHttpHeaders) => Promise<void>) {
  let next = 0
  return async (headers: IncomingHttpHeaders, body: unknown): Promise<Charge> => {
    const key = headers['idempotency-key']
    probe.record(typeof key === 'string' ? key : undefined)
    const { amount, fail } = (body ?? {}) as { amount?: unknown; fail?: unknown }
    if (fail === true) return { status: 503, body: JSON.stringify({ error: 'the provider is away' }) }
    await gate(headers)
    // Members in an order a jsonb column would not keep, so a replay that re-serializes shows.
    return { status: 201, body: JSON.stringify({ zeta: 'z', id: `ch_${++next}`, amount, alpha: [3, 1] }) }
  }
}

async function listen(server: Server): Promise<string> {
  if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`
}

async function closeServer(server: Server): Promise<void> {
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
}

export async function startTarget(framework: Framework, engine: Engine<Queryable>, probe: ProbeServer): Promise<Target> {
  const untrack = trackOpenHandle(`verify target ${framework}`)
  const arrivals = new Map<string, number>()
  const started = await start(framework, engine, probe, arrivals)
  return {
    url: started.url,
    arrivals,
    async close() {
      await started.close()
      untrack()
    },
  }
}

async function start(framework: Framework, engine: Engine<Queryable>, probe: ProbeServer, arrivals: Map<string, number>): Promise<Started> {
  const log = () => {}
  if (framework === 'express' || framework === 'node:http') {
    const server = createServer()
    const charge = chargeHandler(probe, burstGate(server, arrivals))
    if (framework === 'express') {
      const app = express()
      const once = expressIdempotency({ engine, log, scope: (req) => scope(req.headers.authorization) })
      app.post('/v1/charges', express.json(), once, async (req, res) => {
        const out = await charge(req.headers, req.body)
        res.status(out.status).type('application/json').send(out.body)
      })
      server.on('request', app)
    } else {
      const listener = withIdempotency<Queryable>({ engine, log, scope: (req) => scope(req.headers.authorization) }, async (req, res, { body }) => {
        const out = await charge(req.headers, body)
        res.writeHead(out.status, { 'content-type': 'application/json' }).end(out.body)
      })
      server.on('request', (req, res) => void listener(req, res))
    }
    return { url: await listen(server), close: () => closeServer(server) }
  }
  if (framework === 'fastify') {
    const app = Fastify()
    const charge = chargeHandler(probe, burstGate(app.server, arrivals))
    await app.register(oncelyFastify, { engine, log, scope: (request) => scope(request.headers.authorization) })
    app.post('/v1/charges', async (request, reply) => {
      const out = await charge(request.headers, request.body)
      return reply.code(out.status).type('application/json').send(out.body)
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { url: await listen(app.server), close: () => app.close() }
  }
  if (framework === 'hono') {
    const app = new Hono()
    // The gate needs the server, which exists only once the app is served.
    const late: { charge?: ReturnType<typeof chargeHandler> } = {}
    app.post('/v1/charges', honoIdempotency({ engine, log, scope: (c) => scope(c.req.header('authorization')) }), async (c) => {
      const out = await late.charge!(Object.fromEntries(c.req.raw.headers), await c.req.json())
      return c.body(out.body, out.status as 201, { 'content-type': 'application/json' })
    })
    const server = await new Promise<Server>((resolve) => {
      const listening: Server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(listening)) as Server
    })
    late.charge = chargeHandler(probe, burstGate(server, arrivals))
    return { url: await listen(server), close: () => closeServer(server) }
  }
  return startNest(engine, probe, arrivals)
}

async function startNest(engine: Engine<Queryable>, probe: ProbeServer, arrivals: Map<string, number>): Promise<Started> {
  const gateOf: { charge?: ReturnType<typeof chargeHandler> } = {}
  class ChargeController {
    async handle(req: express.Request, res: express.Response): Promise<void> {
      const out = await gateOf.charge!(req.headers, req.body)
      res.status(out.status).type('application/json').send(out.body)
    }
  }
  // Decorated by calls, as test/adapters/harnesses/nestjs.ts does; an application writes them as decorators.
  const prototype = ChargeController.prototype
  const descriptor = Object.getOwnPropertyDescriptor(prototype, 'handle') as PropertyDescriptor
  Controller()(ChargeController)
  Post('/v1/charges')(prototype, 'handle', descriptor)
  UseInterceptors(IdempotencyInterceptor)(prototype, 'handle', descriptor)
  Req()(prototype, 'handle', 0)
  Res()(prototype, 'handle', 1)
  class AppModule {}
  Module({ imports: [IdempotencyModule.forRoot({ engine, log: () => {}, scope: (req: express.Request) => scope(req.headers.authorization) })], controllers: [ChargeController] })(AppModule)
  const app = await NestFactory.create<NestExpressApplication>(AppModule, { logger: false })
  await app.init()
  const server: Server = app.getHttpServer()
  gateOf.charge = chargeHandler(probe, burstGate(server, arrivals))
  const url = await listen(server)
  return {
    url,
    async close() {
      await closeServer(server)
      await app.close()
    },
  }
}
