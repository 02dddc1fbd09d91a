/**
 * The peers' shape (issue 21): `POST /v1/charges` on plain Express 5, as a user would write it
 * without oncely, or with `oncely/express` guarding it (`--oncely`). Auth header parsed, body
 * validated, the fake provider called over HTTP on a keep-alive agent, 201 with the charge JSON;
 * with oncely the provider call is a step and the charge row commits with the completion, on a
 * pipelining pool. `POST /v1/minimal` is the smallest route there is (a JSON answer, nothing
 * else), with the guard or without: what the guard alone costs. `--redis-peer` guards the
 * charges route with `@node-idempotency/core` on Redis instead (bench/baselines/redis-peer.ts).
 *
 *   node --import tsx bench/baselines/express-app.ts --provider-url URL [--port 0]
 *     [--oncely --database-url URL --schema NAME | --redis-peer URL --redis-prefix P] [--provider-timeout-ms N]
 *
 * Prints `listening on http://127.0.0.1:PORT` once ready; stops on SIGTERM or SIGINT.
 */
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express'
import { createProviderCaller, type Charge } from './provider-call.js'

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    'provider-url': { type: 'string' },
    'provider-timeout-ms': { type: 'string', default: '10000' },
    oncely: { type: 'boolean', default: false },
    'database-url': { type: 'string' },
    schema: { type: 'string', default: 'bench_express' },
    'redis-peer': { type: 'string' },
    'redis-prefix': { type: 'string', default: 'bench-peer' },
  },
})
if (!values['provider-url']) throw new Error('--provider-url is required')
const provider = createProviderCaller(values['provider-url'], Number(values['provider-timeout-ms']))

interface ChargeInput {
  amount: number
  currency: string
  customer: string
}

interface Locals {
  user: string
  input: ChargeInput
}

const unauthorized = { type: 'about:blank', title: 'Unauthorized', status: 401 }
const auth: RequestHandler = (req, res, next) => {
  const match = /^Bearer +demo_([0-9]{1,15})$/i.exec(req.get('authorization')?.trim() ?? '')
  if (!match?.[1] || Number(match[1]) <= 0) {
    res.status(401).json(unauthorized)
    return
  }
  ;(res.locals as Locals).user = String(Number(match[1]))
  next()
}

const validate: RequestHandler = (req, res, next) => {
  const body = req.body as Partial<Record<string, unknown>> | undefined
  const { amount, currency, customer } = body ?? {}
  const known = body !== undefined && Object.keys(body).every((field) => field === 'amount' || field === 'currency' || field === 'customer')
  if (!known || typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0 || typeof currency !== 'string' || !/^[a-z]{3}$/.test(currency) || typeof customer !== 'string' || customer.length === 0 || customer.length > 255) {
    res.status(400).json({ type: 'about:blank', title: 'Invalid charge', status: 400 })
    return
  }
  ;(res.locals as Locals).input = { amount, currency, customer }
  next()
}

function view(input: ChargeInput, charge: Charge) {
  return { id: `ch_${charge.id.slice(3)}`, object: 'charge', amount: input.amount, currency: input.currency, customer: input.customer, status: 'succeeded', provider_charge: charge.id, created: charge.created }
}

const app = express()
app.disable('x-powered-by')
app.set('etag', false)

let close = async () => {}
if (values.oncely) {
  const guarded = await oncelyRoutes()
  close = guarded.close
  app.post('/v1/charges', auth, express.json(), validate, guarded.guard, guarded.charge)
  app.post('/v1/minimal', express.json(), guarded.guard, minimal)
} else if (values['redis-peer']) {
  const { redisPeer } = await import('./redis-peer.js')
  const peer = await redisPeer(values['redis-peer'], values['redis-prefix'])
  close = peer.close
  app.post('/v1/charges', auth, express.json(), validate, peer.guard(async (_req, res) => {
    const { input } = res.locals as Locals
    return { status: 201, body: view(input, await provider.charge(input, undefined)) }
  }))
} else {
  app.post('/v1/charges', auth, express.json(), validate, async (req: Request, res: Response, next: NextFunction) => {
    const { input } = res.locals as Locals
    try {
      res.status(201).json(view(input, await provider.charge(input, undefined)))
    } catch (error) {
      next(error)
    }
  })
  app.post('/v1/minimal', express.json(), minimal)
}

function minimal(_req: Request, res: Response): void {
  res.status(201).json({ ok: true })
}

/** The same routes behind `oncely/express`, on a store of their own (`--schema`). */
async function oncelyRoutes(): Promise<{ guard: RequestHandler; charge: RequestHandler; close: () => Promise<void> }> {
  // The build in dist/ (`npm run bench` builds it first), as a user installs the package, not the
  // sources: under tsx (which maps `oncely` to src/ by the tsconfig's paths) esbuild's keepNames
  // wraps every closure made per request in a defineProperty call the published code never makes.
  // The types are the sources', the same declarations dist/ was built from.
  const built = (file: string) => new URL(`../../dist/${file}`, import.meta.url).href
  const [{ default: pg }, { createEngine }, { idempotency }, { createPostgresStore, migrate }] = await Promise.all([
    import('pg'),
    import(built('index.js')) as Promise<typeof import('../../src/index.js')>,
    import(built('adapters/express.js')) as Promise<typeof import('../../src/adapters/express.js')>,
    import(built('store/postgres/index.js')) as Promise<typeof import('../../src/store/postgres/index.js')>,
  ])
  if (!values['database-url']) throw new Error('--oncely needs --database-url')
  const schema = values.schema
  // The reference service's pool settings that matter here: 20 connections, pipelining, so BEGIN, the completion, the row and COMMIT leave together.
  const pool = new pg.Pool({ connectionString: values['database-url'], max: 20, pipeline: true, keepAlive: true })
  await migrate({ pool, schema })
  // Two of these processes start at once on one schema (the bench's second holds keys in flight):
  // CREATE TABLE IF NOT EXISTS is not safe against itself (the loser fails on pg_type's unique
  // index), so they take turns on a transaction lock.
  const setup = await pool.connect()
  try {
    await setup.query('BEGIN')
    await setup.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`oncely-bench:${schema}.charges`])
    await setup.query(`CREATE TABLE IF NOT EXISTS "${schema}".charges (id text PRIMARY KEY, user_id text NOT NULL, amount bigint NOT NULL, currency text NOT NULL, customer text NOT NULL, provider_charge_id text NOT NULL, idempotency_key text, created bigint NOT NULL)`)
    await setup.query('COMMIT')
  } finally {
    setup.release()
  }
  const insert = `INSERT INTO "${schema}".charges (id, user_id, amount, currency, customer, provider_charge_id, idempotency_key, created) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
  const engine = createEngine({ store: createPostgresStore({ pool, schema }) })
  const guard = idempotency({ engine, scope: (req) => req.get('authorization') })
  const charge: RequestHandler = async (req, res, next) => {
    const { user, input } = res.locals as Locals
    const context = req.idempotency
    if (!context) return next(new Error('the charges route ran without its guard'))
    try {
      const charge = await context.execution.step('charge', ({ providerKey }) => provider.charge(input, providerKey))
      const answer = view(input, charge)
      context.writeOnCompletion({ name: 'bench_express_insert_charge', text: insert, values: [answer.id, user, input.amount, input.currency, input.customer, charge.id, context.execution.key, charge.created] })
      res.status(201).json(answer)
    } catch (error) {
      next(error)
    }
  }
  return { guard, charge, close: () => pool.end() }
}

const server = app.listen(Number(values.port), '127.0.0.1')
await new Promise((resolve) => server.once('listening', resolve))
// A held request (the 409 cells) waits on the provider for as long as the bench wants.
server.requestTimeout = 0
process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`)

const stop = () => {
  server.close()
  server.closeAllConnections()
  provider.close()
  void close().finally(() => process.exit(0))
}
process.once('SIGTERM', stop).once('SIGINT', stop)
