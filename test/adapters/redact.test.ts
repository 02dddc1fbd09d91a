import { Hono } from 'hono'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, type StoredResponse } from '../../src/index.js'
import { idempotency, type AdapterOptions, type IdempotencyEnv } from '../../src/adapters/hono.js'
import { createPostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { keyTable } from '../helpers/engine.js'

// The adapters' `redact` hook (issue 23, point 5): what it returns is stored and replayed, the
// first caller gets the handler's own answer; a hook that fails loses neither that answer nor
// the outcome, and never lets the operation run twice.
const CARD = '4242424242424242'
const maskCard = (response: StoredResponse): StoredResponse => ({ ...response, body: Buffer.from(Buffer.from(response.body).toString().replaceAll(CARD, '************4242')) })

describe('redact', () => {
  let db: TestDatabase
  let n = 0
  let runs = 0
  beforeAll(async () => {
    db = await createTestDatabase()
  })
  afterAll(async () => {
    await db?.close()
  })
  const appWith = (redact: AdapterOptions<never>['redact']): Hono<IdempotencyEnv<Queryable>> => {
    const engine = createEngine<Queryable>({ store: createPostgresStore({ pool: db.pool, schema: db.schema }) })
    const app = new Hono<IdempotencyEnv<Queryable>>()
    app.use('/v1/*', idempotency({ engine, scope: () => 'u1', ...(redact === undefined ? {} : { redact }) }))
    app.post('/v1/charges', (c) => ((runs += 1), c.json({ id: 'ch_1', card: CARD }, 201)))
    return app
  }
  const sender = (app: Hono<IdempotencyEnv<Queryable>>) => {
    const key = `redact-${n++}`
    return { key, send: () => app.request('/v1/charges', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"amount":1000}' }) }
  }

  it('stores and replays what the hook returns; the first caller gets the response as sent', async () => {
    const { key, send } = sender(appWith(maskCard))
    const before = runs
    expect(await (await send()).text()).toContain(CARD)
    const replay = await send()
    expect(replay.status).toBe(201)
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(await replay.text()).toBe('{"id":"ch_1","card":"************4242"}')
    const { rows } = await db.pool.query<{ body: Buffer }>(`SELECT response_body AS body FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`, [key])
    expect(rows[0]?.body.includes(CARD)).toBe(false)
    expect(runs - before).toBe(1)
  })

  for (const [name, hook] of [
    ['throws', () => { throw new Error('the redactor is broken') }],
    ['changes the status', (response: StoredResponse) => ({ ...response, status: 200 })],
    ['returns no response', () => undefined as unknown as StoredResponse],
  ] as const) {
    it(`a hook that ${name}: the first caller still gets its answer, a retry 500 result-unavailable, nothing runs twice`, async () => {
      const { send } = sender(appWith(hook))
      const before = runs
      const first = await send()
      expect(first.status).toBe(201)
      expect(await first.text()).toContain(CARD)
      const retry = await send()
      expect(retry.status).toBe(500)
      const problem = (await retry.json()) as { type: string; result_status: number }
      expect(problem.type).toBe('https://oncely.dev/problems/result-unavailable')
      expect(problem.result_status).toBe(201)
      expect(JSON.stringify(problem)).not.toContain(CARD)
      expect(runs - before).toBe(1)
    })
  }

  it('a redact that is not a function is refused at start-up', () => {
    expect(() => appWith('mask' as unknown as AdapterOptions<never>['redact'])).toThrow(/option redact must be a function/)
  })
})
