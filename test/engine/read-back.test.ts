import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, engineChannelName, fingerprintRequest, isOncelyError, type Execution } from '../../src/index.js'
import { createPostgresStore, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { deferred } from '../helpers/deferred.js'
import { ageClaim, engineOn, jsonResponse, keyTable, owned } from '../helpers/engine.js'

// A write whose attempt failed transiently may or may not have landed (issue 8, path 16). When
// its repeat finds the fence gone, the worker reads the row back and must tell its own write from
// someone else's: a take-over, a new claim on a freed key, a key an operator deleted. Each case
// here makes the first attempt fail without landing, changes the row as another party would, and
// checks the worker does not take that change for its own.

let db: TestDatabase
let proxy: TcpProxy
let proxied: pg.Pool
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE charges (id text PRIMARY KEY)')
  proxy = await startTcpProxy(db.url)
  proxied = new pg.Pool({ connectionString: proxy.url, max: 2 })
  proxied.on('error', () => undefined)
})
afterAll(async () => {
  await proxied.end()
  await proxy.close()
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 34 } })
const input = (key: string) => ({ scope: 'u1', key, fingerprint })
const transient = () => Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' })

async function row(key: string) {
  const { rows } = await db.pool.query<{ status: string; fence_token: string | null; outcome_error: string | null }>(
    `SELECT status, fence_token::text, outcome_error FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`,
    [key],
  )
  return rows[0]
}

/** What another party does to the key between the worker's failed attempt and its repeat. */
const meanwhile = {
  /** Another worker takes the stale claim over (the claim keeps its id, the token changes). */
  async takenOver(key: string): Promise<Execution<Queryable>> {
    await ageClaim(db, 'u1', key)
    const taker = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
    expect(taker.how).toBe('take-over')
    return taker
  },
  /** An operator deletes the key (`oncely keys release`, or by hand). */
  async deleted(key: string): Promise<void> {
    await db.pool.query(`DELETE FROM ${keyTable(db)} WHERE scope = 'u1' AND key = $1`, [key])
  },
  /** The key is deleted and a new request claims it: a row of another claim. */
  async claimedAnew(key: string): Promise<Execution<Queryable>> {
    await meanwhile.deleted(key)
    const fresh = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
    expect(fresh.how).toBe('new')
    return fresh
  },
}

type FencedWrite = 'release' | 'suspend' | 'complete' | 'completeInFlight'

/** An engine whose `method` fails its first attempt without landing, after `change` ran. */
function engineFailingFirst(method: FencedWrite, change: () => Promise<unknown>) {
  const store = createPostgresStore({ pool: db.pool, schema: db.schema })
  let calls = 0
  const failFirst = async <A extends unknown[]>(real: (...args: A) => Promise<boolean>, args: A) => {
    if (++calls > 1) return real(...args)
    await change()
    throw transient()
  }
  const overrides: Partial<PostgresStore> = {
    release: (...args) => failFirst((...a: typeof args) => store.release(...a), args),
    suspend: (...args) => failFirst((...a: typeof args) => store.suspend(...a), args),
    complete: (...args) => failFirst((...a: typeof args) => store.complete(...a), args),
  }
  // The flight is the store's one completion method, given statements.
  const storeMethod = method === 'completeInFlight' ? 'complete' : method
  return createEngine<Queryable>({ staleAfterMs: 60_000, store: { ...store, [storeMethod]: overrides[storeMethod] } })
}

const endings: Record<FencedWrite, (execution: Execution<Queryable>, key: string) => Promise<unknown>> = {
  release: (execution) => execution.release(),
  suspend: (execution) => execution.suspend(),
  complete: (execution) => execution.complete(jsonResponse(201, '{}')),
  completeInFlight: (execution, key) => execution.complete(jsonResponse(201, '{}'), { statements: [{ text: 'INSERT INTO charges (id) VALUES ($1)', values: [key] }] }),
}

describe('a write that did not land is not taken for the change someone else made', () => {
  const cases: { write: FencedWrite; change: keyof typeof meanwhile }[] = [
    { write: 'release', change: 'takenOver' },
    { write: 'suspend', change: 'deleted' },
    { write: 'suspend', change: 'claimedAnew' },
    { write: 'complete', change: 'deleted' },
    { write: 'complete', change: 'takenOver' },
    { write: 'completeInFlight', change: 'takenOver' },
  ]
  for (const { write, change } of cases) {
    it(`${write}, the key ${change} meanwhile: ONCELY_LOCK_LOST, and the other party's row stays as it made it`, async () => {
      const key = `not-mine-${write}-${change}`
      let other: Execution<Queryable> | void = undefined
      const engine = engineFailingFirst(write, async () => (other = await meanwhile[change](key)))
      const execution = owned(await engine.begin(input(key)))
      const error: unknown = await endings[write](execution, key).catch((e: unknown) => e)
      expect(error).toMatchObject({ code: 'ONCELY_LOCK_LOST' })
      expect(execution.state).toBe('lost')
      const after = await row(key)
      if (other === undefined) expect(after).toBeUndefined()
      else {
        expect(after).toMatchObject({ status: 'in_progress', fence_token: (other as Execution<Queryable>).fenceToken })
        await (other as Execution<Queryable>).complete(jsonResponse(201, '{}'))
      }
    })
  }

  for (const write of ['complete', 'completeInFlight'] as const) {
    it(`${write}, the claim taken over and completed by the taker meanwhile: ONCELY_LOCK_LOST, not a completion of its own, no charge row`, async () => {
      const key = `not-mine-${write}-settled`
      const engine = engineFailingFirst(write, async () => {
        const taker = await meanwhile.takenOver(key)
        await taker.complete(jsonResponse(201, '{"by":"taker"}'))
      })
      const execution = owned(await engine.begin(input(key)))
      await expect(endings[write](execution, key)).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
      expect(execution.state).toBe('lost')
      const { rows } = await db.pool.query('SELECT 1 FROM charges WHERE id = $1', [key])
      expect(rows).toEqual([])
    })
  }
})

describe('a write that landed, its answer lost, recognised after someone else changed the key', () => {
  it('a release, the key claimed anew by a new request meanwhile: released, the new claim untouched', async () => {
    const key = 'mine-release-claimed-anew'
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    let fresh: Execution<Queryable> | undefined
    let calls = 0
    const engine = createEngine<Queryable>({
      staleAfterMs: 60_000,
      store: {
        ...store,
        release: async (fence) => {
          const released = await store.release(fence)
          if (++calls > 1) return released
          fresh = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
          throw transient()
        },
      },
    })
    const execution = owned(await engine.begin(input(key)))
    await execution.release()
    expect(execution.state).toBe('released')
    expect(await row(key)).toMatchObject({ status: 'in_progress', fence_token: fresh!.fenceToken })
    await fresh!.complete(jsonResponse(201, '{}'))
  })
})

describe('a read-back that cannot be made', () => {
  it('gives up with ONCELY_STORE_UNAVAILABLE naming the read-back and the key', async () => {
    const key = 'read-back-away'
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    let calls = 0
    const engine = createEngine<Queryable>({
      staleAfterMs: 1000,
      leaseRenewMs: 100,
      store: {
        ...store,
        renewLease: () => Promise.reject(transient()),
        release: async (fence) => {
          if (++calls === 1) {
            await meanwhile.takenOver(key)
            throw transient()
          }
          return store.release(fence)
        },
        read: () => Promise.reject(transient()),
      },
    })
    const execution = owned(await engine.begin(input(key)))
    const error: unknown = await execution.release().catch((e: unknown) => e)
    expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
    expect((error as Error).message).toContain('reading the key back for key "read-back-away"')
    expect(execution.state).toBe('lost')
  })
})

describe('a worker that gave its claim up writes nothing more', () => {
  it('past its handler deadline, a completion whose work then fails leaves the claim as it was and the worker lost', async () => {
    const key = 'deadline-then-failed-work'
    const { engine } = engineOn(db, { staleAfterMs: 60_000, leaseRenewMs: 50, handlerDeadlineMs: 200 })
    const execution = owned(await engine.begin(input(key)))
    const gaveUp = deferred()
    const listener = (message: unknown) => (message as { key?: string }).key === key && gaveUp.resolve()
    subscribe(engineChannelName('lock-lost'), listener)
    const refused = new Error('the charge row violates a constraint')
    try {
      await expect(
        execution.completeInTransaction(async () => {
          await gaveUp.promise
          throw refused
        }),
      ).rejects.toBe(refused)
    } finally {
      unsubscribe(engineChannelName('lock-lost'), listener)
    }
    expect(execution.state).toBe('lost')
    expect(await row(key)).toMatchObject({ status: 'in_progress', fence_token: execution.fenceToken, outcome_error: null })
  })

  it('keeps the first reason it gave up for: past its deadline, then the database away, later calls still say the deadline', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const away = () => Promise.reject(transient())
    // A lease of 2 s: the retries give up once their next try would start past its end, and a
    // backoff is at most 1 s, so they cannot give up before 1 s, well after the 300 ms deadline.
    // With a lease of 1 s a drawn backoff of 750 ms could end them at 250 ms, before the deadline
    // (seen once in CI: the later call then said the database).
    const engine = createEngine<Queryable>({ staleAfterMs: 2000, leaseRenewMs: 100, handlerDeadlineMs: 300, store: { ...store, renewLease: away, complete: away } })
    const execution = owned(await engine.begin(input('deadline-then-away')))
    // The completion retries while the database is away; the deadline passes meanwhile, and the
    // retries give up at the end of the lease.
    await expect(execution.complete(jsonResponse(201, '{}'))).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })
    await expect(execution.step('again', () => 1)).rejects.toMatchObject({ code: 'ONCELY_HANDLER_DEADLINE_EXCEEDED' })
  })

  it("a completion in the caller's transaction whose connection broke: ONCELY_STORE_UNAVAILABLE and the worker gives the claim up", async () => {
    const key = 'tx-connection-broke'
    const execution = owned(await engineOn(db, { staleAfterMs: 60_000 }).engine.begin(input(key)))
    const client = await proxied.connect()
    client.on('error', () => undefined)
    try {
      await client.query('BEGIN')
      proxy.cut()
      const error: unknown = await execution.complete(jsonResponse(201, '{}'), { tx: client }).catch((e: unknown) => e)
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect(execution.state).toBe('lost')
    } finally {
      client.release(true)
      proxy.restore()
    }
    expect(await row(key)).toMatchObject({ status: 'in_progress', fence_token: execution.fenceToken })
  })
})
