import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ClientAbortedError, createClient, postgresKeyStore, type ClientResponse, type PostgresKeyStore } from '../../src/client/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { reply, startServer, type Handler, type TestServer } from './support/http-server.js'

// Issue 22 point 4: once the final response has arrived, the caller gets it. A key store that
// cannot mark the operation finished, or an abort that comes after the response, used to turn a
// 201 into a rejection: a caller that took it for a failure and tried again under a new
// operationId would charge twice. The key store is a real PostgreSQL table.
let db: TestDatabase
let tables = 0
const servers: TestServer[] = []
const held: pg.PoolClient[] = []
beforeAll(async () => {
  db = await createTestDatabase({ max: 10 })
})
afterEach(async () => {
  for (const connection of held.splice(0)) {
    await connection.query('ROLLBACK').catch(() => undefined)
    connection.release()
  }
  await Promise.all(servers.splice(0).map((server) => server.close()))
})
afterAll(async () => {
  await db.close()
})

async function serve(handler: Handler): Promise<TestServer> {
  const server = await startServer(handler)
  servers.push(server)
  return server
}

async function freshStore(): Promise<{ keyStore: PostgresKeyStore; table: string }> {
  const table = `final response ${++tables}`
  const keyStore = postgresKeyStore(db.pool, { table })
  await keyStore.setup()
  return { keyStore, table }
}

async function row(table: string, operationId: string): Promise<{ idempotency_key: string; final_status: number | null; finished_at: Date | null } | undefined> {
  const { rows } = await db.pool.query<{ idempotency_key: string; final_status: number | null; finished_at: Date | null }>({
    text: `SELECT idempotency_key, final_status, finished_at FROM "public"."${table}" WHERE operation_id = $1`,
    values: [operationId],
  })
  return rows[0]
}

/** Waits (no bound but the test's timeout) until the row shows the operation finished. */
async function finishedEventually(table: string, operationId: string): Promise<number | null | undefined> {
  for (;;) {
    const found = await row(table, operationId)
    if (found?.finished_at) return found.final_status
    await sleep(20)
  }
}

const charged: Handler = (_request, res) => reply(res, 201, '{"id":"ch_1"}')

describe('a key store that cannot mark the operation finished', () => {
  it('still gives the caller its response, with the failure in finishError; the next call replays under the same key', async () => {
    const { keyStore, table } = await freshStore()
    // A real refusal by PostgreSQL: the claim's INSERT is let through, the finish's UPDATE is not.
    await db.pool.query(`CREATE FUNCTION "refuse update ${tables}"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk quota exceeded (test)'; END $$`)
    await db.pool.query(`CREATE TRIGGER refuse_update BEFORE UPDATE ON "public"."${table}" FOR EACH ROW EXECUTE FUNCTION "refuse update ${tables}"()`)
    const server = await serve(charged)
    const client = createClient({ baseUrl: server.url, keyStore })

    const res = await client.post('/v1/charges', { amount: 1000 }, { operationId: 'order-1:charge' })
    expect(res.status).toBe(201)
    expect(res.json()).toEqual({ id: 'ch_1' })
    expect(res.finishError).toMatchObject({ code: 'ONCELY_KEY_STORE_FAILED', message: expect.stringContaining('got its final response (201)') as unknown })
    expect((res.finishError?.cause as Error).message).toContain('disk quota exceeded (test)')
    // Unfinished, so never pruned: the key is kept, and the next call is not blind.
    expect(await row(table, 'order-1:charge')).toMatchObject({ finished_at: null, idempotency_key: res.key })

    await db.pool.query(`DROP TRIGGER refuse_update ON "public"."${table}"`)
    const again = await client.post('/v1/charges', { amount: 1000 }, { operationId: 'order-1:charge' })
    expect(again.finishError).toBeUndefined()
    expect(server.requests.map((r) => r.headers['idempotency-key'])).toEqual([res.key, res.key])
    expect(await row(table, 'order-1:charge')).toMatchObject({ final_status: 201 })
  })
})

describe('an abort after the whole response has arrived', () => {
  it('gives the caller the response, and the key store marks the operation finished', async () => {
    const { keyStore, table } = await freshStore()
    const server = await serve(charged)
    const controller = new AbortController()
    // The caller's own fetch (a logging wrapper, say) aborts once it has read the response.
    const abortingFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init)
      const body = await res.arrayBuffer()
      controller.abort(new Error('user pressed stop'))
      return new Response(body, { status: res.status, headers: res.headers })
    }
    const client = createClient({ baseUrl: server.url, keyStore, fetch: abortingFetch })
    const res = await client.post('/v1/charges', { amount: 1000 }, { operationId: 'order-2:charge', signal: controller.signal })
    expect(controller.signal.aborted).toBe(true)
    expect(res.status).toBe(201)
    expect(res.json()).toEqual({ id: 'ch_1' })
    expect(await finishedEventually(table, 'order-2:charge')).toBe(201)
  })

  it('gives the caller the response of a call without an operationId too', async () => {
    const server = await serve(charged)
    const controller = new AbortController()
    const abortingFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init)
      const body = await res.arrayBuffer()
      controller.abort()
      return new Response(body, { status: res.status, headers: res.headers })
    }
    const res = await createClient({ baseUrl: server.url, fetch: abortingFetch }).post('/v1/charges', { amount: 1000 }, { signal: controller.signal })
    expect(res.status).toBe(201)
  })

  it('still aborts after a response that would be retried (a 503 is no answer)', async () => {
    const server = await serve((_request, res) => reply(res, 503, '{}'))
    const controller = new AbortController()
    const abortingFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init)
      const body = await res.arrayBuffer()
      controller.abort()
      return new Response(body, { status: res.status, headers: res.headers })
    }
    const error = await createClient({ baseUrl: server.url, fetch: abortingFetch })
      .post('/v1/charges', { amount: 1000 }, { signal: controller.signal })
      .catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ClientAbortedError)
    expect(server.requests).toHaveLength(1)
  })

  it('while the key store is marking it finished: resolves with the response; the write left behind still lands', async () => {
    const { keyStore, table } = await freshStore()
    const controller = new AbortController()
    let blocker: pg.PoolClient | undefined
    // The server answers only once another transaction holds the claim's row, so the client's
    // finish (an UPDATE of that row) waits on a real row lock.
    const server = await serve(async (_request, res) => {
      blocker = await db.pool.connect()
      held.push(blocker)
      await blocker.query('BEGIN')
      await blocker.query({ text: `SELECT 1 FROM "public"."${table}" WHERE operation_id = $1 FOR UPDATE`, values: ['order-3:charge'] })
      reply(res, 201, '{"id":"ch_1"}')
    })
    const client = createClient({ baseUrl: server.url, keyStore })
    const call: Promise<ClientResponse> = client.post('/v1/charges', { amount: 1000 }, { operationId: 'order-3:charge', signal: controller.signal })
    await updateWaitingOnLock(table)
    controller.abort(new Error('user pressed stop'))
    const res = await call
    expect(res.status).toBe(201)
    expect(res.json()).toEqual({ id: 'ch_1' })
    // Still held: the call could not have seen the finish confirmed.
    expect(res.finishError).toMatchObject({ code: 'ONCELY_KEY_STORE_FAILED', message: expect.stringContaining('aborted') as unknown })
    expect((await row(table, 'order-3:charge'))?.finished_at).toBeNull()
    await blocker?.query('ROLLBACK')
    expect(await finishedEventually(table, 'order-3:charge')).toBe(201)
  })
})

/** Waits until an UPDATE of `table` is waiting on a lock in PostgreSQL. */
async function updateWaitingOnLock(table: string): Promise<void> {
  for (;;) {
    const { rows } = await db.pool.query<{ n: number }>({
      text: `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
      values: [`UPDATE "public"."${table}"%`],
    })
    if ((rows[0]?.n ?? 0) > 0) return
    await sleep(10)
  }
}
