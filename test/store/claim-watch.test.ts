import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { createEngine, type Decision, type EngineOptions, type IdempotencyStore } from '../../src/index.js'
import { LISTEN_LINGER_MS } from '../../src/store/postgres/claim-watcher.js'
import { createPostgresStore, type PoolLike, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { deferred } from '../helpers/deferred.js'
import { jsonResponse, keyTable, owned } from '../helpers/engine.js'
import { until } from '../helpers/until.js'
import { trackOpenHandle } from '../setup/guard-open-handles.js'

// Issue 23, point 2: a duplicate waiting for a claim in flight is woken by LISTEN/NOTIFY when the
// claim ends, across connections, with its reads kept as the truth. The waiters here read the row
// once a minute at most, so an answer within seconds can only come from a notification.

const LONG_POLL = { waitFirstPollMs: 60_000, waitMaxPollMs: 60_000, waitWatchedPollMs: 60_000 }
const fingerprint = 'a'.repeat(64)

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

/** A store whose reads are counted, sent and answered: a waiter's reads are its polls. */
function counted(store: PostgresStore) {
  const counts = { reads: 0, answered: 0 }
  const read = async (scope: string, key: string) => {
    counts.reads++
    try {
      return await store.read(scope, key)
    } finally {
      counts.answered++
    }
  }
  return { store: { ...store, read } satisfies IdempotencyStore<Queryable>, counts }
}

/** The owner of a key, on connections of its own that never listen. */
function ownerEngine() {
  return createEngine({ store: createPostgresStore({ pool: db.newPool(2), schema: db.schema, listen: false }), staleAfterMs: 30_000 })
}

function waiterEngine(store: IdempotencyStore<Queryable>, options: Partial<EngineOptions<Queryable>> = LONG_POLL) {
  return createEngine({ store, staleAfterMs: 30_000, ...options })
}

const awaited = async (key: string) => (await db.pool.query<{ awaited: boolean }>(`SELECT awaited FROM ${keyTable(db)} WHERE key = $1`, [key])).rows[0]?.awaited === true
const listeners = async () => (await db.pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`)).rows

describe('a waiting duplicate woken by LISTEN/NOTIFY', () => {
  it('is woken on another connection by the completion, reads once, and gets the replay long before its next read', async () => {
    const waiterStore = createPostgresStore({ pool: db.newPool(3), schema: db.schema })
    const { store, counts } = counted(waiterStore)
    const key = randomUUID()
    const first = owned(await ownerEngine().begin({ scope: 'u1', key, fingerprint }))
    const waitingSince = performance.now()
    const duplicate = waiterEngine(store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await until(() => awaited(key), 'the waiter to mark the row')
    expect(counts.reads).toBe(0)
    await first.complete(jsonResponse(201, '{"id":"ch_1"}'))
    const answer = await duplicate
    // Its first read was due half a minute after it began waiting at the earliest (jitter on the upper half).
    expect(performance.now() - waitingSince).toBeLessThan(LONG_POLL.waitFirstPollMs / 2)
    expect(answer).toMatchObject({ kind: 'replay', response: { status: 201 } })
    expect(counts.reads).toBe(1)
    expect(waiterStore.listenConnections).toBe(1)
    // Nobody waits any more: the LISTEN connection goes back to the pool, then the pool has none out.
    await until(async () => (await listeners()).length === 0, 'the LISTEN connection to be let go')
  })

  it('is woken by the completion made in another process, and replays it', async () => {
    const { store, counts } = counted(createPostgresStore({ pool: db.newPool(3), schema: db.schema }))
    const key = randomUUID()
    const owner = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('support/claim-owner.ts', import.meta.url)), db.url, db.schema, 'u1', key, fingerprint], { stdio: ['pipe', 'pipe', 'inherit'] })
    const untrack = trackOpenHandle('the claim-owner process')
    const exited = new Promise((resolve) => owner.once('close', resolve)).then(untrack)
    try {
      const lines = createInterface({ input: owner.stdout })[Symbol.asyncIterator]()
      expect((await lines.next()).value).toMatch(/^claimed /)
      const duplicate = waiterEngine(store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
      await until(() => awaited(key), 'the waiter to mark the row')
      const waitingSince = performance.now()
      owner.stdin.write('complete\n')
      expect(await duplicate).toMatchObject({ kind: 'replay', response: { status: 201, body: Buffer.from('{"id":"ch_child"}') } })
      expect(performance.now() - waitingSince).toBeLessThan(LONG_POLL.waitFirstPollMs / 2)
      expect(counts.reads).toBe(1)
      expect((await lines.next()).value).toBe('completed')
    } finally {
      owner.stdin.end()
      await exited
    }
  })

  it('is woken by a completion sent in one flight and replays it', async () => {
    const { store, counts } = counted(createPostgresStore({ pool: db.newPool(3), schema: db.schema }))
    const key = randomUUID()
    const first = owned(await ownerEngine().begin({ scope: 'u1', key, fingerprint }))
    const duplicate = waiterEngine(store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await until(() => awaited(key), 'the waiter to mark the row')
    await first.complete(jsonResponse(201, '{"id":"ch_1"}'), { statements: [{ text: 'SELECT 1' }] })
    expect(await duplicate).toMatchObject({ kind: 'replay', response: { status: 201 } })
    expect(counts.reads).toBe(1)
  })

  it('watching a claim that ended before it could be marked wakes the waiter at once: nothing would notify it', async () => {
    const store = createPostgresStore({ pool: db.newPool(3), schema: db.schema })
    const key = randomUUID()
    const first = owned(await ownerEngine().begin({ scope: 'u1', key, fingerprint }))
    await first.complete(jsonResponse(201, '{}'))
    const woken = deferred()
    const watch = store.watchClaim?.({ scope: 'u1', key, claimId: first.claimId }, () => woken.resolve())
    await woken.promise
    expect(watch?.live).toBe(false)
    watch?.stop()
  })

  it('is woken by a release and claims the key, and by a suspension and takes it over', async () => {
    const { store, counts } = counted(createPostgresStore({ pool: db.newPool(3), schema: db.schema }))
    const owner = ownerEngine()
    for (const end of ['release', 'suspend'] as const) {
      const key = randomUUID()
      const first = owned(await owner.begin({ scope: 'u1', key, fingerprint }))
      const duplicate = waiterEngine(store).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
      await until(() => awaited(key), 'the waiter to mark the row')
      const readsBefore = counts.reads
      await (end === 'release' ? first.release() : first.suspend())
      const answer: Decision<Queryable> = await duplicate
      expect([end, counts.reads - readsBefore]).toEqual([end, 1])
      const execution = owned(answer)
      expect(execution.how).toBe(end === 'release' ? 'new' : 'take-over')
      await execution.complete(jsonResponse(201, '{}'))
    }
  })

  it('a completion nobody waits for sends no notification; a marked one sends one, with the claim id', async () => {
    const owner = ownerEngine()
    const [unwatched, watched] = [randomUUID(), randomUUID()]
    const a = owned(await owner.begin({ scope: 'u1', key: unwatched, fingerprint }))
    const b = owned(await owner.begin({ scope: 'u1', key: watched, fingerprint }))
    await db.pool.query(`UPDATE ${keyTable(db)} SET awaited = true WHERE key = $1`, [watched])
    const listener = new pg.Client({ connectionString: db.url })
    await listener.connect()
    try {
      const payloads: string[] = []
      const second = deferred()
      listener.on('notification', (message) => {
        payloads.push(message.payload ?? '')
        if (message.payload === b.claimId) second.resolve()
      })
      const channel = (await listener.query<{ channel: string }>("SELECT 'oncely_keys_' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 8) AS channel", [`"${db.schema.replaceAll('"', '""')}"`])).rows[0]?.channel
      await listener.query(`LISTEN "${channel}"`)
      // Committed in this order, so delivered in this order: the first would arrive before the second.
      await a.complete(jsonResponse(201, '{}'))
      await b.complete(jsonResponse(201, '{}'))
      await second.promise
      expect(payloads).toEqual([b.claimId])
    } finally {
      await listener.end()
    }
  })

  it('after pg_terminate_backend of the LISTEN connection, reads answer the waiter meanwhile, and the reconnect wakes waiters again', async () => {
    // The LISTEN connection comes from a pool whose connect the test can hold, so the reconnect
    // waits until the test lets it: in between, only the waiter's reads can answer it.
    const direct = db.newPool(2)
    let gate = deferred()
    gate.resolve()
    const listenPool: PoolLike = { query: direct.query.bind(direct), connect: async () => (await gate.promise, direct.connect()) }
    const waiterStore = createPostgresStore({ pool: db.newPool(3), schema: db.schema, listen: listenPool })
    const { store, counts } = counted(waiterStore)
    const polling = waiterEngine(store, { waitFirstPollMs: 10, waitMaxPollMs: 50, waitWatchedPollMs: 60_000 })
    const owner = ownerEngine()
    // The earlier tests' stores let their LISTEN connections go; this test's is then the only one.
    await until(async () => (await listeners()).length === 0, 'earlier LISTEN connections to be let go')

    const key = randomUUID()
    const first = owned(await owner.begin({ scope: 'u1', key, fingerprint }))
    const duplicate = polling.begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await until(() => awaited(key), 'the waiter to mark the row')
    const [backend, ...others] = await listeners()
    expect(others).toEqual([])
    gate = deferred()
    await db.pool.query('SELECT pg_terminate_backend($1)', [backend?.pid])
    await until(async () => (await listeners()).length === 0, 'the LISTEN backend to end')
    // Answers, not calls: a read sent before the completion may be the one that sees it committed.
    const answeredBefore = counts.answered
    await first.complete(jsonResponse(201, '{"id":"ch_1"}'))
    expect(await duplicate).toMatchObject({ kind: 'replay', response: { status: 201 } })
    // Answered by its reads: no notification could reach it, the listener has not reconnected.
    expect(counts.answered - answeredBefore).toBeGreaterThan(0)
    expect(waiterStore.listenConnections).toBe(1)

    gate.resolve()
    const next = randomUUID()
    const second = owned(await owner.begin({ scope: 'u1', key: next, fingerprint }))
    const slow = waiterEngine(store)
    const waiting = slow.begin({ scope: 'u1', key: next, fingerprint }, { waitMs: 600_000 })
    await until(() => waiterStore.listenConnections === 2, 'the LISTEN connection to be made again')
    await until(() => awaited(next), 'the waiter to mark the row')
    // The reconnect woke the waiter to read once (what ended meanwhile was not notified): let that read answer first.
    await until(() => counts.answered === counts.reads, 'the read after the reconnect')
    const readsAtRelease = counts.reads
    await second.complete(jsonResponse(201, '{"id":"ch_2"}'))
    expect(await waiting).toMatchObject({ kind: 'replay', response: { status: 201 } })
    expect(counts.reads - readsAtRelease).toBe(1)
  })

  it('with listen: false the store never listens and never marks; waiters are answered by their reads', async () => {
    const store = createPostgresStore({ pool: db.newPool(3), schema: db.schema, listen: false })
    expect('watchClaim' in store).toBe(false)
    const key = randomUUID()
    const first = owned(await ownerEngine().begin({ scope: 'u1', key, fingerprint }))
    const { store: countedStore, counts } = counted(store)
    const duplicate = waiterEngine(countedStore, { waitFirstPollMs: 10, waitMaxPollMs: 50 }).begin({ scope: 'u1', key, fingerprint }, { waitMs: 600_000 })
    await until(() => counts.reads > 0, 'the waiter to read the row')
    await first.complete(jsonResponse(201, '{}'))
    expect(await duplicate).toMatchObject({ kind: 'replay' })
    expect(await awaited(key)).toBe(false)
    expect(store.listenConnections).toBe(0)
  })

  it('a pg.Pool of one connection never lends it to LISTEN, which would leave its waiters no connection to read with', () => {
    expect('watchClaim' in createPostgresStore({ pool: db.newPool(1), schema: db.schema })).toBe(false)
    expect('watchClaim' in createPostgresStore({ pool: db.newPool(2), schema: db.schema })).toBe(true)
  })

  it('refuses a listen option that is neither a boolean nor a pool, naming it', () => {
    expect(() => createPostgresStore({ pool: db.pool, listen: 'yes' as never })).toThrow(/listen/)
  })
})

describe("the store's claim watcher (one LISTEN connection for its waiters)", () => {
  /** A store's watch of a claim, called directly, with its wake-ups counted. */
  function watchOf(store: PostgresStore, key: string, claimId: string) {
    const woken = { count: 0 }
    const watch = store.watchClaim?.({ scope: 'u1', key, claimId }, () => void woken.count++)
    if (watch === undefined) throw new Error('the store does not watch claims')
    return { watch, woken }
  }

  /** A pool for LISTEN whose connect waits on `gate()`, and which remembers the clients it gave. */
  function gatedListenPool() {
    const direct = db.newPool(2)
    const state = { gate: deferred(), clients: [] as pg.PoolClient[] }
    state.gate.resolve()
    const pool: PoolLike = {
      query: direct.query.bind(direct),
      connect: async () => {
        await state.gate.promise
        const client = await direct.connect()
        state.clients.push(client)
        return client
      },
    }
    return { pool, state }
  }

  const lockWaits = async () => (await db.pool.query<{ n: number }>("SELECT count(*)::integer AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0]?.n ?? 0

  it('a watch is live only once its claim is marked: not while the mark waits on the row, though the connection listens', async () => {
    const store = createPostgresStore({ pool: db.newPool(3), schema: db.schema })
    const key = randomUUID()
    const first = owned(await ownerEngine().begin({ scope: 'u1', key, fingerprint }))
    const holder = await db.pool.connect()
    try {
      await holder.query('BEGIN')
      await holder.query(`SELECT 1 FROM ${keyTable(db)} WHERE key = $1 FOR UPDATE`, [key])
      const { watch } = watchOf(store, key, first.claimId)
      await until(async () => (await lockWaits()) === 1, 'the mark to wait on the row lock')
      expect(store.listenConnections).toBe(1)
      expect(watch.live).toBe(false)
      await holder.query('ROLLBACK')
      await until(() => awaited(key), 'the mark to land')
      await until(() => watch.live, 'the watch to be live')
      watch.stop()
    } finally {
      holder.release()
    }
    await first.complete(jsonResponse(201, '{}'))
  })

  it('of two duplicates watching one claim, the one still watching is woken by its end after the other stopped; the stopped one is not', async () => {
    const store = createPostgresStore({ pool: db.newPool(3), schema: db.schema })
    const key = randomUUID()
    const first = owned(await ownerEngine().begin({ scope: 'u1', key, fingerprint }))
    // One after the other: two marks at once may leave the second not live (awaitClaim's snapshot), and woken to read.
    const gone = watchOf(store, key, first.claimId)
    await until(() => gone.watch.live, 'the first watch to be live')
    const staying = watchOf(store, key, first.claimId)
    try {
      await until(() => staying.watch.live, 'the second watch to be live')
      gone.watch.stop()
      await first.complete(jsonResponse(201, '{}'))
      await until(() => staying.woken.count === 1, 'the remaining waiter to be woken', 5000)
      expect(gone.woken.count).toBe(0)
    } finally {
      gone.watch.stop()
      staying.watch.stop()
    }
  })

  it('a waiter that stops (even twice) while another waits leaves the LISTEN connection up past the linger; the last one lets it go', async () => {
    const store = createPostgresStore({ pool: db.newPool(3), schema: db.schema })
    const owner = ownerEngine()
    const [a, b] = [randomUUID(), randomUUID()]
    const firstA = owned(await owner.begin({ scope: 'u1', key: a, fingerprint }))
    const firstB = owned(await owner.begin({ scope: 'u1', key: b, fingerprint }))
    const watchA = watchOf(store, a, firstA.claimId)
    const watchB = watchOf(store, b, firstB.claimId)
    try {
      await until(() => watchA.watch.live && watchB.watch.live, 'both watches to be live')
      watchA.watch.stop()
      watchA.watch.stop()
      // The linger is a timer: only its passing can show it was not started.
      await new Promise((resolve) => setTimeout(resolve, LISTEN_LINGER_MS * 2))
      expect(watchB.watch.live).toBe(true)
      await firstB.complete(jsonResponse(201, '{}'))
      await until(() => watchB.woken.count === 1, 'the waiter still watching to be woken', 5000)
      expect(store.listenConnections).toBe(1)
    } finally {
      watchA.watch.stop()
      watchB.watch.stop()
    }
    await until(async () => (await listeners()).length === 0, 'the LISTEN connection to be let go')
    await firstA.complete(jsonResponse(201, '{}'))
  })

  it('a waiter that stops before the connection listens never marks its claim', async () => {
    const { pool, state } = gatedListenPool()
    const store = createPostgresStore({ pool: db.newPool(3), schema: db.schema, listen: pool })
    const owner = ownerEngine()
    const [a, b] = [randomUUID(), randomUUID()]
    const firstA = owned(await owner.begin({ scope: 'u1', key: a, fingerprint }))
    const firstB = owned(await owner.begin({ scope: 'u1', key: b, fingerprint }))
    state.gate = deferred()
    const stopped = watchOf(store, a, firstA.claimId)
    stopped.watch.stop()
    const watching = watchOf(store, b, firstB.claimId)
    state.gate.resolve()
    // The two wait for the same connection; the stopped one's turn comes first.
    await until(() => watching.watch.live, 'the other watch to be live')
    expect(await awaited(a)).toBe(false)
    expect(stopped.woken.count).toBe(0)
    watching.watch.stop()
    await Promise.all([firstA.complete(jsonResponse(201, '{}')), firstB.complete(jsonResponse(201, '{}'))])
  })

  it('a lost LISTEN connection wakes every waiter to read at once and is logged as the store’s; the reconnect wakes them again', async () => {
    const { pool, state } = gatedListenPool()
    const store = createPostgresStore({ pool: db.newPool(3), schema: db.schema, listen: pool })
    const owner = ownerEngine()
    const [a, b] = [randomUUID(), randomUUID()]
    const firstA = owned(await owner.begin({ scope: 'u1', key: a, fingerprint }))
    const firstB = owned(await owner.begin({ scope: 'u1', key: b, fingerprint }))
    const [watchA, watchB] = [watchOf(store, a, firstA.claimId), watchOf(store, b, firstB.claimId)]
    await until(() => watchA.watch.live && watchB.watch.live, 'both watches to be live')
    const warnings: string[] = []
    const warn = vi.spyOn(console, 'warn').mockImplementation((line: string) => void warnings.push(line))
    try {
      state.gate = deferred()
      await db.pool.query('SELECT pg_terminate_backend($1)', [(state.clients[0] as unknown as { processID: number }).processID])
      await until(() => watchA.woken.count === 1 && watchB.woken.count === 1, 'the loss to wake both waiters')
      expect(watchA.watch.live).toBe(false)
      expect(warnings).toHaveLength(1)
      expect(warnings[0]).toMatch(/^oncely store: the LISTEN connection was lost \(terminating connection due to administrator command\); reconnecting in \d+ ms, polling meanwhile$/)
      // What ended while it was away was notified to nobody: the reconnect wakes both to read.
      state.gate.resolve()
      await until(() => store.listenConnections === 2, 'the LISTEN connection to be made again')
      await until(() => watchA.woken.count === 2 && watchB.woken.count === 2, 'the reconnect to wake both waiters')
    } finally {
      warn.mockRestore()
      watchA.watch.stop()
      watchB.watch.stop()
    }
    await Promise.all([firstA.complete(jsonResponse(201, '{}')), firstB.complete(jsonResponse(201, '{}'))])
  })
})
