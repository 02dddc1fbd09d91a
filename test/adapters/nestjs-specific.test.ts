import { randomUUID } from 'node:crypto'
import type { Server } from 'node:http'
import { Body, Controller, HttpCode, Module, Post, Res, UseInterceptors, type INestApplication } from '@nestjs/common'
import type { Response } from 'express'
import { NestFactory } from '@nestjs/core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Idempotency, IdempotencyInterceptor, IdempotencyModule, type IdempotencyContext } from '../../src/adapters/nestjs.js'
import { createEngine, type Engine } from '../../src/engine/engine.js'
import { isOncelyError } from '../../src/errors.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { serveOnFreePort, type AppUnderTest } from './harness.js'

let db: TestDatabase
let engine: Engine<Queryable>
beforeAll(async () => {
  db = await createTestDatabase()
  engine = createEngine({ store: createPostgresStore({ pool: db.pool, schema: db.schema }), staleAfterMs: 30_000 })
  await db.pool.query('CREATE TABLE nest_charges (id text PRIMARY KEY, amount integer NOT NULL)')
})
afterAll(async () => {
  await db.close()
})

let calls = 0
let hold: Promise<void> | undefined
let started: (() => void) | undefined

/** The way an application writes it: decorators, a returned value, the context from `@Idempotency()`. */
@Controller('v1')
class ChargesController {
  @Post('charges')
  @UseInterceptors(IdempotencyInterceptor)
  async charge(@Body() body: { amount: number }, @Idempotency() { execution, writeOnCompletion }: IdempotencyContext<Queryable>) {
    calls++
    started?.()
    await hold
    const charge = await execution.step('charge', ({ providerKey }) => ({ id: `ch_${providerKey.slice(0, 12)}`, amount: body.amount }))
    writeOnCompletion(async (tx) => {
      await tx.query({ text: 'INSERT INTO nest_charges (id, amount) VALUES ($1, $2)', values: [charge.id, charge.amount] })
    })
    return charge
  }

  @Post('exports')
  @UseInterceptors(IdempotencyInterceptor)
  async export(@Res() res: Response) {
    calls++
    res.status(200).set('content-type', 'text/csv')
    res.write('id,amount\n')
    await Promise.resolve()
    throw new Error('the export source went away')
  }

  @Post('refunds')
  @HttpCode(204)
  refund(@Idempotency() idempotency: IdempotencyContext<Queryable> | undefined) {
    calls++
    return idempotency === undefined ? 'unguarded' : undefined
  }
}

async function start(imports: unknown[]): Promise<{ app: INestApplication; client: AppUnderTest }> {
  class AppModule {}
  Module({ imports: imports as never[], controllers: [ChargesController] })(AppModule)
  const app = await NestFactory.create(AppModule, { logger: false })
  await app.init()
  const served = await serveOnFreePort(app.getHttpServer() as Server)
  const close = async () => {
    await served.close()
    await app.close()
  }
  return { app, client: { request: (request) => served.request(request), close } }
}

const post = (path: string, key: string | undefined, body: object) => ({
  method: 'POST',
  path,
  headers: { 'x-user-id': '7', ...(key === undefined ? {} : { 'idempotency-key': key }) },
  body,
})

describe('nestjs: a handler that throws after its streamed response started (issue 23)', () => {
  it('cuts the stream and records result-unavailable, where Nest’s exception filter would end it as if whole; the retry does not run it again', async () => {
    const recorded = deferred()
    const { client } = await start([IdempotencyModule.forRoot({ engine, scope: (req) => req.get('x-user-id'), log: () => {}, onOutcome: () => recorded.resolve() })])
    try {
      calls = 0
      const key = randomUUID()
      const first = await client.request(post('/v1/exports', key, {})).then(
        (response) => response,
        (error: unknown) => error,
      )
      expect(first).toBeInstanceOf(Error)
      await recorded.promise
      const retry = await client.request(post('/v1/exports', key, {}))
      expect(retry.status).toBe(500)
      const problem = JSON.parse(retry.body.toString()) as { type: string; detail: string; result_status: number }
      expect(problem).toMatchObject({ type: 'https://oncely.dev/problems/result-unavailable', result_status: 200 })
      expect(problem.detail).toContain('the handler threw: the export source went away')
      expect(calls).toBe(1)
    } finally {
      await client.close()
    }
  })
})

describe('nestjs: a handler that returns its value', () => {
  it('stores what Nest sends, replays it, answers 409 and 422 in place of Nest’s reply, and commits writeOnCompletion rows', async () => {
    const { client } = await start([IdempotencyModule.forRoot({ engine, scope: (req) => req.get('x-user-id') })])
    try {
      calls = 0
      const key = randomUUID()
      const release = deferred()
      const entered = deferred()
      hold = release.promise
      started = () => entered.resolve()
      const first = client.request(post('/v1/charges', key, { amount: 500 }))
      await entered.promise
      const busy = await client.request(post('/v1/charges', key, { amount: 500 }))
      expect([busy.status, busy.headers.get('content-type'), busy.headers.get('retry-after')]).toEqual([409, 'application/problem+json', '1'])
      hold = undefined
      started = undefined
      release.resolve()
      const created = await first
      expect(created.status).toBe(201)
      const charge = JSON.parse(created.body.toString()) as { id: string; amount: number }
      const replay = await client.request(post('/v1/charges', key, { amount: 500 }))
      expect([replay.status, replay.body.equals(created.body), replay.headers.get('idempotent-replayed')]).toEqual([201, true, 'true'])
      const reused = await client.request(post('/v1/charges', key, { amount: 900 }))
      expect([reused.status, (JSON.parse(reused.body.toString()) as { idempotency_key: string }).idempotency_key]).toEqual([422, key])
      expect(calls).toBe(1)
      expect((await db.pool.query('SELECT amount FROM nest_charges WHERE id = $1', [charge.id])).rows).toEqual([{ amount: 500 }])
    } finally {
      await client.close()
    }
  })

  it('applyToAllRoutes guards every route without @UseInterceptors, and a 204 route replays', async () => {
    const { client } = await start([IdempotencyModule.forRoot({ engine, scope: (req) => req.get('x-user-id'), applyToAllRoutes: true })])
    try {
      calls = 0
      const key = randomUUID()
      expect((await client.request(post('/v1/refunds', undefined, {}))).status).toBe(400)
      const first = await client.request(post('/v1/refunds', key, {}))
      const replay = await client.request(post('/v1/refunds', key, {}))
      expect([first.status, replay.status, replay.headers.get('idempotent-replayed'), calls]).toEqual([204, 204, 'true', 1])
    } finally {
      await client.close()
    }
  })

  it('refuses bad options when the module is defined, naming the option', () => {
    for (const [bad, name] of [
      [{ applyToAllRoutes: 'yes' }, 'applyToAllRoutes'],
      [{ methods: 'POST' }, 'methods'],
    ] as const) {
      let error: unknown
      try {
        IdempotencyModule.forRoot({ engine, scope: 'global', ...(bad as object) })
      } catch (caught) {
        error = caught
      }
      expect(isOncelyError(error, 'ONCELY_INVALID_OPTION')).toBe(true)
      expect((error as Error).message).toContain(`option ${name} `)
    }
  })
})
