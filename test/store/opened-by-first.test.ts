import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createEngine, fingerprintRequest, type Execution } from '../../src/index.js'
import { createPostgresStore, type Queryable, type QueryConfig } from '../../src/store/postgres/index.js'
import { beginOf, transaction } from '../../src/store/postgres/statement-runner.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { jsonResponse, keyTable, owned } from '../helpers/engine.js'

// Issue 21: on a connection that does not pipeline, the store's own transaction sends BEGIN's
// commands with its first statement, as one query with a single Sync: opening the transaction
// costs no round trip of its own. `complete(response, { writes })` and `completeInTransaction`
// pay one round trip fewer on a plain pool.

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE opened_marks (id text PRIMARY KEY)')
})
afterAll(async () => {
  await db.close()
})

const BEGIN = beginOf(['BEGIN', 'SET LOCAL statement_timeout = 4000', 'SET LOCAL lock_timeout = 1500'])
const mark = (id: string): QueryConfig => ({ text: 'INSERT INTO opened_marks (id) VALUES ($1)', values: [id] })
const settings: QueryConfig = { text: "SELECT current_setting('statement_timeout') AS statement, current_setting('lock_timeout') AS lock" }

async function marked(id: string): Promise<number | null> {
  return (await db.pool.query('SELECT 1 FROM opened_marks WHERE id = $1', [id])).rowCount
}

/** The one connection of a new pool (max 1, plain unless `settings` say otherwise), watched: its socket writes, and the ReadyForQuery messages it is sent (one per Sync). */
async function watchedPool(settings: pg.PoolConfig = { pipeline: false }): Promise<{ pool: pg.Pool; counts: { writes: number; readies: number; reset(): void } }> {
  const pool = db.newPool(1, settings)
  const client = await pool.connect()
  const counts = {
    writes: 0,
    readies: 0,
    reset() {
      counts.writes = 0
      counts.readies = 0
    },
  }
  const connection = (client as unknown as { connection: pg.Connection & { stream: Record<'_write' | '_writev', (...args: unknown[]) => unknown> } }).connection
  for (const method of ['_write', '_writev'] as const) {
    const original = connection.stream[method].bind(connection.stream)
    connection.stream[method] = (...args: unknown[]) => (counts.writes++, original(...args))
  }
  connection.on('readyForQuery', () => counts.readies++)
  client.release()
  return { pool, counts }
}

describe("the store's own transaction on a connection that does not pipeline", () => {
  it("sends BEGIN's commands with the first statement: one write and one answer, the SET LOCALs in force for it and gone after the COMMIT", async () => {
    const { pool, counts } = await watchedPool()
    const seen = await transaction(pool, BEGIN, 5000, async (tx) => {
      const { rows } = await tx.query<{ statement: string; lock: string }>(settings)
      await tx.query(mark('opened-first'))
      return rows
    })
    expect(seen).toEqual([{ statement: '4s', lock: '1500ms' }])
    // BEGIN with the SELECT, the INSERT, the COMMIT; each part sent once its predecessor answered.
    expect(counts).toMatchObject({ writes: 3, readies: 3 })
    expect(await marked('opened-first')).toBe(1)
    // SET LOCAL ended with the transaction: the connection's own settings are back.
    const after = await pool.query<{ statement: string; lock: string }>(settings)
    expect(after.rows).toEqual([{ statement: '0', lock: '0' }])
  })

  it('statements sent together: the first carries BEGIN, the others follow it, in order', async () => {
    const { pool, counts } = await watchedPool()
    await transaction(pool, BEGIN, 5000, async (tx) => {
      await Promise.all([tx.query(mark('together-a')), tx.query(mark('together-b')), tx.query(mark('together-c'))])
    })
    expect(counts).toMatchObject({ writes: 4, readies: 4 })
    expect([await marked('together-a'), await marked('together-b'), await marked('together-c')]).toEqual([1, 1, 1])
  })

  it('a work that sends nothing opens nothing: no BEGIN, no COMMIT, nothing written', async () => {
    const { pool, counts } = await watchedPool()
    await expect(transaction(pool, BEGIN, 5000, async () => 'nothing to write')).resolves.toBe('nothing to write')
    expect(counts).toMatchObject({ writes: 0, readies: 0 })
    // A work that fails before sending anything: nothing to roll back either.
    await expect(transaction(pool, BEGIN, 5000, () => Promise.reject(new Error('before any statement')))).rejects.toThrow('before any statement')
    expect(counts).toMatchObject({ writes: 0, readies: 0 })
    expect(pool.totalCount).toBe(1)
  })

  it('the first statement fails: its error is thrown, a ROLLBACK ends the transaction its BEGIN opened, and the connection serves the next one', async () => {
    await db.pool.query("INSERT INTO opened_marks (id) VALUES ('taken-first')")
    const { pool, counts } = await watchedPool()
    await expect(transaction(pool, BEGIN, 5000, (tx) => tx.query(mark('taken-first')))).rejects.toMatchObject({ code: '23505' })
    // The opening query, then the ROLLBACK.
    expect(counts).toMatchObject({ writes: 2, readies: 2 })
    const state = await pool.query<{ open: boolean }>("SELECT now() <> statement_timestamp() AS open")
    // Outside any transaction: now() is this statement's own start.
    expect(state.rows).toEqual([{ open: false }])
    await transaction(pool, BEGIN, 5000, (tx) => tx.query(mark('after-first-failed')))
    expect(await marked('after-first-failed')).toBe(1)
  })

  it('a later statement fails: the first, sent with BEGIN, is rolled back with it', async () => {
    await db.pool.query("INSERT INTO opened_marks (id) VALUES ('taken-later')")
    const { pool } = await watchedPool()
    const failing = transaction(pool, BEGIN, 5000, async (tx) => {
      await tx.query(mark('rolled-back-with-begin'))
      await tx.query(mark('taken-later'))
    })
    await expect(failing).rejects.toMatchObject({ code: '23505' })
    expect(await marked('rolled-back-with-begin')).toBe(0)
  })

  it('a first statement the single-Sync query cannot take (its own read timeout, a named statement not yet prepared) goes after BEGIN alone', async () => {
    const { pool, counts } = await watchedPool()
    await transaction(pool, BEGIN, 5000, (tx) => tx.query({ ...mark('own-timeout'), query_timeout: 3000 }))
    // BEGIN, the INSERT, COMMIT.
    expect(counts).toMatchObject({ writes: 3, readies: 3 })
    const named = (id: string): QueryConfig => ({ ...mark(id), name: 'opened_by_first_mark' })
    counts.reset()
    await transaction(pool, BEGIN, 5000, (tx) => tx.query(named('named-first-use')))
    // node-postgres prepares it on its own path: BEGIN, Parse with the INSERT, COMMIT.
    expect(counts.readies).toBe(3)
    counts.reset()
    await transaction(pool, BEGIN, 5000, (tx) => tx.query(named('named-prepared')))
    expect(counts).toMatchObject({ writes: 2, readies: 2 })
    expect([await marked('own-timeout'), await marked('named-first-use'), await marked('named-prepared')]).toEqual([1, 1, 1])
  })

  it("a backend terminated while the opening query runs: the failure is thrown, nothing commits, the connection is not reused", async () => {
    const pool = db.newPool(1, { pipeline: false })
    pool.on('error', () => undefined)
    const dying = transaction(pool, BEGIN, 5000, async (tx) => {
      await tx.query({ text: 'SELECT pg_terminate_backend(pg_backend_pid())' })
      await tx.query(mark('after-terminated'))
    })
    await expect(dying).rejects.toMatchObject({ code: 'ONCELY_STORE_UNAVAILABLE' })
    expect(pool.totalCount).toBe(0)
    expect(await marked('after-terminated')).toBe(0)
    await transaction(pool, BEGIN, 5000, (tx) => tx.query(mark('after-terminated-next')))
    expect(await marked('after-terminated-next')).toBe(1)
  })
})

describe('completions in a transaction of the store on a plain pool', () => {
  const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })

  const writeOne = (id: string) => (tx: Queryable) => tx.query(mark(id)).then(() => undefined)
  const workWriting = (id: string | undefined, body = '{}') => async (tx: Queryable) => {
    if (id !== undefined) await tx.query(mark(id))
    return { response: jsonResponse(201, body), value: undefined }
  }

  /**
   * An engine on a watched pool of one connection, plain unless `pipeline`, its completion
   * statements prepared by a first completion of each kind (node-postgres prepares a named
   * statement on its own path the first time).
   */
  async function warmEngine(prefix: string, pipeline = false) {
    const { pool, counts } = pipeline ? await watchedPool({ pipeline }) : await watchedPool()
    const engine = createEngine({ store: createPostgresStore({ pool, schema: db.schema }) })
    await owned(await engine.begin({ scope: 'u1', key: `${prefix}-warm-writes`, fingerprint })).complete(jsonResponse(201, '{}'), { writes: writeOne(`${prefix}-warm-writes`) })
    await owned(await engine.begin({ scope: 'u1', key: `${prefix}-warm-in-tx`, fingerprint })).completeInTransaction(workWriting(`${prefix}-warm-in-tx`))
    return { engine, counts }
  }

  /** A fresh key of a warmed engine, completed by `complete`, the counts reset just before it. */
  async function measured(prefix: string, complete: (execution: Execution<Queryable>, key: string) => Promise<unknown>, pipeline = false) {
    const { engine, counts } = await warmEngine(prefix, pipeline)
    const key = `${prefix}-measured`
    const execution = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
    counts.reset()
    await complete(execution, key)
    const completing = { writes: counts.writes, readies: counts.readies }
    const replay = await engine.begin({ scope: 'u1', key, fingerprint })
    return { counts: completing, key, replayed: replay.kind === 'replay' ? Buffer.from(replay.response.body).toString() : replay.kind }
  }

  it('complete(response, { writes }): BEGIN and the fenced completion in one round trip, the write, the COMMIT', async () => {
    const { counts, key, replayed } = await measured('writes', (execution, key) => execution.complete(jsonResponse(201, '{"id":"ch_w"}'), { writes: writeOne(key) }))
    // Was four: BEGIN, the completion, the write, the COMMIT.
    expect(counts).toMatchObject({ writes: 3, readies: 3 })
    expect(await marked(key)).toBe(1)
    expect(replayed).toBe('{"id":"ch_w"}')
  })

  it("completeInTransaction: BEGIN with the work's first write, then the completion with the COMMIT", async () => {
    const { counts, key, replayed } = await measured('in-tx', (execution, key) => execution.completeInTransaction(workWriting(key, '{"id":"ch_t"}')))
    // Was four: BEGIN, the write, the completion, the COMMIT.
    expect(counts).toMatchObject({ writes: 2, readies: 2 })
    expect(await marked(key)).toBe(1)
    expect(replayed).toBe('{"id":"ch_t"}')
  })

  it('completeInTransaction whose work writes nothing: BEGIN, the completion and the COMMIT in one round trip', async () => {
    const { counts, replayed } = await measured('in-tx-empty', (execution) => execution.completeInTransaction(workWriting(undefined, '{"id":"ch_e"}')))
    expect(counts).toMatchObject({ writes: 1, readies: 1 })
    expect(replayed).toBe('{"id":"ch_e"}')
  })

  it('completeInTransaction on a pipelining pool: BEGIN and the write in one write, the completion with the COMMIT in a second', async () => {
    const { counts, key, replayed } = await measured('in-tx-pipelined', (execution, key) => execution.completeInTransaction(workWriting(key, '{"id":"ch_p"}')), true)
    // Was three writes and four answers: BEGIN with the write, the completion, the COMMIT.
    expect(counts).toMatchObject({ writes: 2, readies: 3 })
    expect(await marked(key)).toBe(1)
    expect(replayed).toBe('{"id":"ch_p"}')
  })

  for (const [kind, pipeline] of [
    ['writes', false],
    ['completeInTransaction', false],
    ['completeInTransaction', true],
  ] as const) {
    it(`a lost fence (${kind}, ${pipeline ? 'pipelining' : 'plain'} pool): ONCELY_LOCK_LOST, and the write in the transaction is rolled back`, async () => {
      const { engine } = await warmEngine(`lost-${kind}-${pipeline}`, pipeline)
      const key = `lost-${kind}-${pipeline}-measured`
      const execution = owned(await engine.begin({ scope: 'u1', key, fingerprint }))
      // Another holder's token: the fenced completion matches no row.
      await db.pool.query(`UPDATE ${keyTable(db)} SET fence_token = gen_random_uuid() WHERE key = $1`, [key])
      const completing = kind === 'writes' ? execution.complete(jsonResponse(201, '{}'), { writes: writeOne(key) }) : execution.completeInTransaction(workWriting(key))
      await expect(completing).rejects.toMatchObject({ code: 'ONCELY_LOCK_LOST' })
      expect(await marked(key)).toBe(0)
      // The other holder's claim is untouched.
      const { rows } = await db.pool.query<{ status: string }>(`SELECT status FROM ${keyTable(db)} WHERE key = $1`, [key])
      expect(rows).toEqual([{ status: 'in_progress' }])
      // The pool's one connection was not left inside the aborted transaction: the next key completes on it.
      const next = `${key}-next`
      await owned(await engine.begin({ scope: 'u1', key: next, fingerprint })).completeInTransaction(workWriting(next))
      expect(await marked(next)).toBe(1)
    })
  }
})
