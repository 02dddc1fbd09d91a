import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { PoolLike } from '../../src/store/postgres/index.js'
import { WakeUpListener } from '../../src/store/postgres/wake-up-listener.js'
import { createTestDatabase, withDatabase, type TestDatabase } from '../helpers/db.js'
import { until } from '../helpers/until.js'

// The LISTEN connection shared by the relay and the store's waiting duplicates (docs/conventions.md,
// SQL): a hint on a dedicated connection that reconnects by itself with capped, jittered backoff.
// Real connections throughout; a loss is a real pg_terminate_backend.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const LOST = /^(.+): the LISTEN connection was lost \((.+)\); reconnecting in (\d+) ms, polling meanwhile$/

/** A listener on a channel of its own, with everything it tells its owner recorded. */
function listenerOn(pool: PoolLike, label?: string) {
  const channel = `oncely_wake_${randomBytes(4).toString('hex')}`
  const seen = { payloads: [] as string[], logs: [] as string[], connected: [] as boolean[], lost: 0 }
  const hooks = { connected: (reconnected: boolean) => void seen.connected.push(reconnected), lost: () => void seen.lost++ }
  const wake = (payload: string) => void seen.payloads.push(payload)
  const log = (line: string) => void seen.logs.push(line)
  const listener = label === undefined ? new WakeUpListener(pool, channel, wake, log) : new WakeUpListener(pool, channel, wake, log, label, hooks)
  return { listener, channel, seen }
}

/** A pool that hands out real pg clients and remembers the last one, so a test can act on the LISTEN connection itself. */
function capturing(pool: pg.Pool) {
  const connections: pg.PoolClient[] = []
  const asked = { connects: 0 }
  const wrapped: PoolLike = {
    query: pool.query.bind(pool),
    connect: async () => {
      asked.connects++
      const client = await pool.connect()
      connections.push(client)
      return client
    },
  }
  return { pool: wrapped, connections, asked }
}

const backendPid = async (client: pg.PoolClient) => (client as unknown as { processID: number }).processID
const lastQueryOf = async (pid: number) => (await db.pool.query<{ query: string }>('SELECT query FROM pg_stat_activity WHERE pid = $1', [pid])).rows[0]?.query

describe('WakeUpListener', () => {
  it("wakes its owner once it listens, then with each notification's payload on its channel, and with nothing sent to another channel", async () => {
    const { pool, connections } = capturing(db.newPool(2))
    const { listener, channel, seen } = listenerOn(pool, 'test listener')
    listener.start()
    await until(() => listener.listening, 'the listener to listen')
    // The wake-up right after LISTEN: what was committed before it listened is read at once.
    expect(seen.payloads).toEqual([''])
    expect(seen.connected).toEqual([false])
    expect(listener.connections).toBe(1)
    // The same connection listening on a second channel (as a pool's user could leave it): that channel is not this listener's.
    await connections[0]?.query('LISTEN other_channel')
    await db.pool.query("SELECT pg_notify('other_channel', 'not mine')")
    await db.pool.query('SELECT pg_notify($1, $2)', [channel, 'claim-1'])
    await until(() => seen.payloads.includes('claim-1'), 'the notification on its channel')
    expect(seen.payloads).toEqual(['', 'claim-1'])
    await listener.stop()
  })

  it('stop() sends UNLISTEN and gives the connection back to the pool alive, its notifications no longer its owner’s', async () => {
    const pool = db.newPool(1)
    const { pool: wrapped, connections } = capturing(pool)
    const { listener, channel, seen } = listenerOn(wrapped, 'test listener')
    listener.start()
    await until(() => listener.listening, 'the listener to listen')
    const pid = await backendPid(connections[0] as pg.PoolClient)
    await listener.stop()
    expect(listener.listening).toBe(false)
    expect(await lastQueryOf(pid)).toMatch(/^UNLISTEN /)
    expect([pool.totalCount, pool.idleCount]).toEqual([1, 1])
    // The pool's next user gets that very connection and listens on the channel itself: the stopped listener hears nothing of it.
    const next = await pool.connect()
    try {
      expect(await backendPid(next)).toBe(pid)
      const heard: string[] = []
      next.on('notification', (message) => heard.push(message.payload ?? ''))
      await next.query(`LISTEN "${channel}"`)
      await db.pool.query('SELECT pg_notify($1, $2)', [channel, 'after stop'])
      await until(() => heard.length === 1, 'the next user to hear its notification')
      expect(seen.payloads).toEqual([''])
    } finally {
      next.release()
    }
  })

  it('stopped while its LISTEN is in flight, it destroys that connection, does not listen, and tells its owner nothing', async () => {
    // No idle timeout: a connection given back to the pool stays there, so only a destroyed one is gone.
    const pool = db.newPool(1, { idleTimeoutMillis: 0 })
    const { pool: wrapped, connections } = capturing(pool)
    const { listener, seen } = listenerOn(wrapped, 'test listener')
    listener.start()
    void listener.stop()
    await until(() => connections.length === 1 && pool.totalCount === 0, 'the connection to be destroyed')
    expect(listener.listening).toBe(false)
    expect(seen).toEqual({ payloads: [], logs: [], connected: [], lost: 0 })
  })

  it('stopped before it starts, it never connects', async () => {
    const { pool, asked } = capturing(db.newPool(1))
    const { listener, seen } = listenerOn(pool, 'test listener')
    await listener.stop()
    listener.start()
    // A connect the listener would make is asked for at once, synchronously after start().
    expect(asked.connects).toBe(0)
    expect(seen.payloads).toEqual([])
  })

  it('a connection killed by pg_terminate_backend is reported once, logged with its error, and made again 125 to 250 ms later; each loss starts the backoff over', async () => {
    const { pool, connections } = capturing(db.newPool(2))
    const { listener, seen } = listenerOn(pool, 'test listener')
    listener.start()
    try {
      for (const loss of [1, 2]) {
        await until(() => listener.listening && listener.connections === loss, 'the listener to listen')
        const pid = await backendPid(connections[loss - 1] as pg.PoolClient)
        await db.pool.query('SELECT pg_terminate_backend($1)', [pid])
        await until(() => seen.lost === loss, 'the loss to be reported')
        expect(listener.listening).toBe(false)
      }
      await until(() => listener.listening && listener.connections === 3, 'the listener to listen again')
      // The error and then the end of the same connection: one loss each, one log line, one retry.
      expect(seen.lost).toBe(2)
      expect(seen.connected).toEqual([false, true, true])
      expect(seen.logs).toHaveLength(2)
      for (const line of seen.logs) {
        const [, label, cause, delay] = LOST.exec(line) ?? []
        expect([label, cause]).toEqual(['test listener', 'terminating connection due to administrator command'])
        // A connection that listened resets the count of failures: each loss waits the first pause again.
        expect(Number(delay)).toBeGreaterThanOrEqual(125)
        expect(Number(delay)).toBeLessThanOrEqual(250)
      }
      // Each (re)connect wakes the owner: what was committed while it was away is read at once.
      expect(seen.payloads).toEqual(['', '', ''])
    } finally {
      await listener.stop()
    }
  })

  it('a connection that ends without an error (closed under it) is lost too, logged as closed, and made again', async () => {
    const { pool, connections } = capturing(db.newPool(2))
    const { listener, seen } = listenerOn(pool, 'test listener')
    listener.start()
    try {
      await until(() => listener.listening, 'the listener to listen')
      // Ended on purpose, so node-postgres emits 'end' and no 'error'.
      await connections[0]?.end()
      await until(() => listener.listening && listener.connections === 2, 'the listener to listen again')
      expect(seen.lost).toBe(1)
      expect(seen.logs).toHaveLength(1)
      expect(LOST.exec(seen.logs[0] ?? '')?.slice(1, 3)).toEqual(['test listener', 'closed'])
    } finally {
      await listener.stop()
    }
  })

  it('a database it cannot reach is tried again with pauses that double: 125 to 250 ms, then 250 to 500, then 500 to 1000', async () => {
    const unreachable = new pg.Pool({ connectionString: withDatabase(db.url, `oncely_missing_${randomBytes(4).toString('hex')}`), max: 1 })
    const { listener, seen } = listenerOn(unreachable, 'test listener')
    try {
      listener.start()
      await until(() => seen.logs.length >= 3, 'three failed attempts')
      const delays = seen.logs.slice(0, 3).map((line) => {
        const [, label, cause, delay] = LOST.exec(line) ?? []
        expect(label).toBe('test listener')
        expect(cause).toMatch(/^database ".+" does not exist$/)
        return Number(delay)
      })
      const ranges = delays.map((delay, i) => delay >= 125 * 2 ** i && delay <= 250 * 2 ** i)
      expect([delays, ranges]).toEqual([delays, [true, true, true]])
      // Jittered, so that listeners cut off together do not come back together: all three at the
      // bottom of their range would be one chance in about a hundred million.
      expect(delays.some((delay, i) => delay > 125 * 2 ** i)).toBe(true)
      expect(seen.lost).toBeGreaterThanOrEqual(3)
      expect(seen.connected).toEqual([])
      expect(listener.listening).toBe(false)
    } finally {
      await listener.stop()
      await unreachable.end()
    }
  })

  it("a pool whose clients emit no notifications: the client goes back, the log says polling alone, and nothing is retried (the relay's label by default)", async () => {
    const pool = db.newPool(1)
    // A driver's client without on(): a real connection, offered only as query and release.
    const plain: PoolLike = {
      query: pool.query.bind(pool),
      connect: async () => {
        const client = await pool.connect()
        return { query: client.query.bind(client), release: client.release.bind(client) }
      },
    }
    const { listener, seen } = listenerOn(plain)
    listener.start()
    await until(() => seen.logs.length > 0, 'the log line')
    expect(seen.logs).toEqual(["oncely relay: the pool's clients emit no notifications; relying on polling alone"])
    expect(listener.listening).toBe(false)
    expect(listener.connections).toBe(0)
    expect([pool.totalCount, pool.idleCount]).toEqual([1, 1])
    expect(seen.payloads).toEqual([])
    await listener.stop()
  })
})
