import { randomUUID } from 'node:crypto'
import type pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest, isOncelyError, OncelyError } from '../../src/index.js'
import type { PoolLike, QueryConfig, QueryResult } from '../../src/store/postgres/index.js'
import { createPostgresStore } from '../../src/store/postgres/index.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { keyTable, storeClaim } from '../helpers/engine.js'

// The store's own paths that no engine test reaches on purpose (issue 13, the survivors of
// src/store/postgres/store.ts in docs/mutation-report.md): the claim loop's second round and its
// two ways out, the client-side timeout kept out of the caller's transaction, the value of
// countClaimsOlderThan, and which errors are transient. What markStepStarted records is a case
// of the port's conformance table (test/store/conformance.ts).

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 7 } })
const table = () => keyTable(db)

/** A pool whose every statement is seen; `limit` stops a claim loop that would never end. */
function watchedPool(pool: pg.Pool, limit = 20): PoolLike & { claims: () => number } {
  let claims = 0
  return {
    claims: () => claims,
    async query<R>(config: QueryConfig): Promise<QueryResult<R>> {
      if (config.text.trimStart().startsWith('WITH existing')) {
        claims++
        if (claims > limit) throw new Error(`more than ${limit} claim statements`)
      }
      const result: QueryResult<unknown> = await pool.query(config)
      return result as QueryResult<R>
    },
    connect: () => pool.connect(),
  }
}

/** Resolves once `sql` (on the test's own pool) returns a row with `ok` true: a latch on what PostgreSQL shows. */
async function until(sql: string, values: unknown[]): Promise<void> {
  for (;;) {
    const { rows } = await db.pool.query<{ ok: boolean }>(sql, values)
    if (rows[0]?.ok === true) return
    await new Promise((resolve) => setImmediate(resolve))
  }
}

/** True once a backend of `application` has waited on a lock for longer than `ms`. */
const waitingOnLock = (application: string, ms: number) =>
  until(
    `SELECT count(*) > 0 AS ok FROM pg_stat_activity
      WHERE application_name = $1 AND wait_event_type = 'Lock' AND clock_timestamp() - query_start > $2::integer * interval '1 millisecond'`,
    [application, ms],
  )

function claimRequest(scope: string, key: string) {
  return { scope, key, fingerprint, ttlMs: 86_400_000, claimId: randomUUID(), fenceToken: randomUUID() }
}

describe('the claim loop (store.claim)', () => {
  it('an insert that loses to a row committed after its snapshot finds no row; the second round returns that row as existing', async () => {
    const application = `oncely-claim-race-${randomUUID().slice(0, 8)}`
    const pool = db.newPool(2, { application_name: application })
    const watched = watchedPool(pool)
    // Far longer than the first round takes, and no longer than this process has run: a give-up
    // measured from anything but the round's own start would fire here.
    const lockTimeoutMs = Math.max(1000, Math.floor(performance.now()))
    const store = createPostgresStore({ pool: watched, schema: db.schema, statementTimeoutMs: lockTimeoutMs * 2, lockTimeoutMs })
    const locker = await db.pool.connect()
    const scope = 'claim-race'
    const key = randomUUID()
    const theirs = randomUUID()
    try {
      await locker.query('BEGIN')
      await locker.query(
        `INSERT INTO ${table()} (scope, key, fingerprint, status, claim_id, fence_token, locked_at, expires_at)
         VALUES ($1, $2, $3, 'in_progress', $4::uuid, $5::uuid, now(), now() + interval '1 day')`,
        [scope, key, fingerprint, theirs, randomUUID()],
      )
      // The claim's INSERT waits for the locker's uncommitted row; its snapshot is already taken.
      const attempt = store.claim(claimRequest(scope, key))
      await waitingOnLock(application, 0)
      await locker.query('COMMIT')
      const result = await attempt
      expect(result.kind).toBe('existing')
      expect(result.kind === 'existing' && result.snapshot.claimId).toBe(theirs)
      expect(watched.claims()).toBe(2)
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined)
      locker.release()
    }
  })

  it('a claim that never finds a row gives up after five rounds with ONCELY_STORE_UNEXPECTED', async () => {
    const pool = db.newPool(2)
    const watched = watchedPool(pool)
    const store = createPostgresStore({ pool: watched, schema: db.schema })
    const scope = `claim-void-${randomUUID().slice(0, 8)}`
    const fn = `"${db.schema.replaceAll('"', '""')}".oncely_test_void_${randomUUID().replaceAll('-', '')}`
    const trigger = `oncely_test_void_${randomUUID().replaceAll('-', '')}`
    // A BEFORE INSERT trigger that drops this scope's rows: every round inserts nothing and finds nothing.
    await db.pool.query(
      `CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN IF NEW.scope = '${scope}' THEN RETURN NULL; END IF; RETURN NEW; END $$`,
    )
    await db.pool.query(`CREATE TRIGGER ${trigger} BEFORE INSERT ON ${table()} FOR EACH ROW EXECUTE FUNCTION ${fn}()`)
    try {
      const error = await store.claim(claimRequest(scope, 'never')).then(
        () => undefined,
        (e: unknown) => e,
      )
      expect(isOncelyError(error, 'ONCELY_STORE_UNEXPECTED')).toBe(true)
      expect((error as Error).message).toBe('claim of key "never" found no row after 5 attempts')
      expect(watched.claims()).toBe(5)
    } finally {
      await db.pool.query(`DROP TRIGGER ${trigger} ON ${table()}`)
      await db.pool.query(`DROP FUNCTION ${fn}()`)
    }
  })

  it('a claim that waited longer than lockTimeoutMs for a lock writes nothing and gives up with ONCELY_STORE_UNAVAILABLE, no second round', async () => {
    const application = `oncely-claim-late-${randomUUID().slice(0, 8)}`
    const pool = db.newPool(2, { application_name: application })
    const watched = watchedPool(pool)
    const lockTimeoutMs = 150
    const store = createPostgresStore({ pool: watched, schema: db.schema, statementTimeoutMs: 20_000, lockTimeoutMs })
    const locker = await db.pool.connect()
    const scope = 'claim-late'
    const key = randomUUID()
    try {
      await locker.query('BEGIN')
      // Blocks writers only; the claim waits for it before its statement does anything.
      await locker.query(`LOCK TABLE ${table()} IN SHARE MODE`)
      const attempt = store.claim(claimRequest(scope, key)).then(
        () => undefined,
        (e: unknown) => e,
      )
      await waitingOnLock(application, lockTimeoutMs + 20)
      await locker.query('COMMIT')
      const error = await attempt
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect((error as Error).message).toBe(`the claim of key ${JSON.stringify(key)} waited longer than lockTimeoutMs (${lockTimeoutMs}) for a lock`)
      expect(watched.claims()).toBe(1)
      const { rows } = await db.pool.query(`SELECT 1 FROM ${table()} WHERE scope = $1 AND key = $2`, [scope, key])
      expect(rows).toEqual([])
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined)
      locker.release()
    }
  })
})

describe('a claim of a key already there (issue 21)', () => {
  it('reads the row and proposes no insert: a BEFORE INSERT trigger fires for a new key only, not for a claim in flight or a completed key', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const schema = `"${db.schema.replaceAll('"', '""')}"`
    // A row-level BEFORE INSERT trigger fires for every row an INSERT proposes, before ON CONFLICT
    // looks for a conflict: the count is how many insertions the claims attempted.
    await db.pool.query(`CREATE TABLE ${schema}.proposed_inserts (key text NOT NULL)`)
    await db.pool.query(`CREATE FUNCTION ${schema}.count_proposed_insert() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO ${schema}.proposed_inserts (key) VALUES (NEW.key); RETURN NEW; END $$`)
    await db.pool.query(`CREATE TRIGGER count_proposed_insert BEFORE INSERT ON ${table()} FOR EACH ROW EXECUTE FUNCTION ${schema}.count_proposed_insert()`)
    const proposed = async () => (await db.pool.query<{ key: string }>(`SELECT key FROM ${schema}.proposed_inserts ORDER BY key`)).rows.map((row) => row.key)
    try {
      await db.pool.query(
        `INSERT INTO ${table()} (scope, key, fingerprint, status, claim_id, response_status, response_headers, response_body, expires_at)
         VALUES ('already-there', 'completed', $1, 'completed', $2::uuid, 201, '[]', '\\x7b7d', now() + interval '1 day')`,
        [fingerprint, randomUUID()],
      )
      await db.pool.query(`DELETE FROM ${schema}.proposed_inserts`)
      expect((await store.claim(claimRequest('already-there', 'in-flight'))).kind).toBe('inserted')
      expect(await proposed()).toEqual(['in-flight'])
      for (const key of ['in-flight', 'completed', 'in-flight']) {
        const attempt = await store.claim(claimRequest('already-there', key))
        expect(attempt.kind === 'existing' && attempt.snapshot.status).toBe(key === 'completed' ? 'completed' : 'in_progress')
      }
      expect(await proposed()).toEqual(['in-flight'])
    } finally {
      await db.pool.query(`DROP TRIGGER IF EXISTS count_proposed_insert ON ${table()}`)
      await db.pool.query(`DROP FUNCTION IF EXISTS ${schema}.count_proposed_insert()`)
      await db.pool.query(`DROP TABLE IF EXISTS ${schema}.proposed_inserts`)
    }
  })

  it('does not wait for a release in flight: the row its snapshot sees is reported, and the next claim, after the release commits, owns the key', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const key = randomUUID()
    expect((await store.claim(claimRequest('release-in-flight', key))).kind).toBe('inserted')
    const releaser = await db.pool.connect()
    try {
      // The release's DELETE holds the row, uncommitted: an INSERT of the same key would wait for it.
      await releaser.query('BEGIN')
      await releaser.query(`DELETE FROM ${table()} WHERE scope = $1 AND key = $2`, ['release-in-flight', key])
      const answered = await Promise.race([store.claim(claimRequest('release-in-flight', key)), new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 1000))])
      expect(answered !== 'waited' && answered.kind === 'existing' && answered.snapshot.status).toBe('in_progress')
      await releaser.query('COMMIT')
      expect((await store.claim(claimRequest('release-in-flight', key))).kind).toBe('inserted')
    } finally {
      await releaser.query('ROLLBACK').catch(() => undefined)
      releaser.release()
    }
  })
})

describe('a claim given up on (statementTimeoutMs) whose answer comes late', () => {
  // The pool's only connection is held, so the claim waits for one past its timeout: the driver
  // cannot time that out, the store does, and the statement still runs once the connection is free.
  async function lateClaim(existing: boolean) {
    const pool = db.newPool(1)
    pool.on('error', () => undefined)
    const answers: Array<Promise<unknown>> = []
    const store = createPostgresStore({
      pool: {
        query<R>(config: QueryConfig): Promise<QueryResult<R>> {
          const answer = pool.query(config) as unknown as Promise<QueryResult<R>>
          answers.push(answer.catch(() => undefined))
          return answer
        },
        connect: () => pool.connect(),
      },
      schema: db.schema,
      statementTimeoutMs: 300,
      lockTimeoutMs: 100,
    })
    const scope = 'claim-given-up'
    const key = randomUUID()
    if (existing) await storeClaim(createPostgresStore({ pool: db.pool, schema: db.schema }), { scope, key, fingerprint })
    const held = await pool.connect()
    let lateInserts = 0
    let released = false
    try {
      const error = await store.claim({ ...claimRequest(scope, key), onLateInsert: () => lateInserts++ }).then(
        () => undefined,
        (e: unknown) => e,
      )
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      expect((error as Error).message).toBe('PostgreSQL did not answer the claim within 300 ms')
      held.release()
      released = true
      expect(answers).toHaveLength(1)
      await answers[0]
      // The store's own reaction to the answer runs after the answer settles.
      await new Promise((resolve) => setImmediate(resolve))
      return lateInserts
    } finally {
      if (!released) held.release()
    }
  }

  it('names the claim in its error, and a late answer that inserted the claim calls onLateInsert once', async () => {
    expect(await lateClaim(false)).toBe(1)
  })

  it('a late answer that found the key already there does not call onLateInsert', async () => {
    expect(await lateClaim(true)).toBe(0)
  })
})

describe('the client-side timeout: the store’s own statements, never the caller’s transaction', () => {
  it('a statement given up on gives its pool connection back: the next statement on a one-connection pool answers', async () => {
    const pool = db.newPool(1)
    pool.on('error', () => undefined)
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs: 300, lockTimeoutMs: 100, preparedStatements: false })
    const scope = 'client-timeout'
    const key = randomUUID()
    const claimed = await storeClaim(store, { scope, key, fingerprint })
    if (claimed.kind !== 'claimed') throw new Error('the key was not free')
    const locker = await db.pool.connect()
    try {
      await locker.query('BEGIN')
      await locker.query(`SELECT 1 FROM ${table()} WHERE scope = $1 AND key = $2 FOR UPDATE`, [scope, key])
      const error = await store.renewLease({ scope, key, fenceToken: claimed.claim.fenceToken }, 60_000).then(
        () => undefined,
        (e: unknown) => e,
      )
      expect(isOncelyError(error, 'ONCELY_STORE_UNAVAILABLE')).toBe(true)
      // Unnamed statements (preparedStatements: false) are called "a statement".
      expect((error as Error).message).toMatch(/ a statement( within 300 ms)?$/)
      // The lock is still held: the renewal given up on must not hold the pool's only connection.
      const snapshot = await store.read(scope, key)
      expect(snapshot?.claimId).toBe(claimed.claim.claimId)
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined)
      locker.release()
    }
  })

  it('inside the caller’s own transaction the store sets no query timeout: the caller’s own (300 ms) applies, not statementTimeoutMs', async () => {
    const pool = db.newPool(2)
    const callerPool = db.newPool(1, { query_timeout: 300 })
    callerPool.on('error', () => undefined)
    const statementTimeoutMs = 5000
    const store = createPostgresStore({ pool, schema: db.schema, statementTimeoutMs, lockTimeoutMs: 1000 })
    const scope = 'caller-timeout'
    const key = randomUUID()
    const claimed = await storeClaim(store, { scope, key, fingerprint })
    if (claimed.kind !== 'claimed') throw new Error('the key was not free')
    const locker = await db.pool.connect()
    const caller = await callerPool.connect()
    let broken: Error | undefined
    try {
      await locker.query('BEGIN')
      await locker.query(`SELECT 1 FROM ${table()} WHERE scope = $1 AND key = $2 FOR UPDATE`, [scope, key])
      await caller.query('BEGIN')
      const startedAt = performance.now()
      const outcome = { status: 'completed' as const, response: { status: 200, headers: [], body: Buffer.from('{}') } }
      const error = await store.complete({ scope, key, fenceToken: claimed.claim.fenceToken }, { ...outcome, tx: caller }).then(
        () => undefined,
        (e: unknown) => e,
      )
      const elapsed = performance.now() - startedAt
      expect(error).toBeInstanceOf(OncelyError)
      expect(((error as Error).cause as Error | undefined)?.message).toBe('Query read timeout')
      expect(elapsed).toBeLessThan(statementTimeoutMs / 2)
      broken = new Error('left mid-statement')
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined)
      locker.release()
      caller.release(broken ?? true)
    }
  })
})

describe('the counting statements', () => {
  it('countClaimsOlderThan counts in_progress claims by their age, fresh lease or not', async () => {
    const scope = `older-${randomUUID().slice(0, 8)}`
    // A schema of its own would be cleaner; the count is over the whole table, so compare before and after.
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const hourAgo = randomUUID()
    const dayAgo = randomUUID()
    for (const key of [hourAgo, dayAgo, randomUUID()]) await storeClaim(store, { scope, key, fingerprint })
    const before = { hour: await store.countClaimsOlderThan(3_000_000), day: await store.countClaimsOlderThan(80_000_000) }
    await db.pool.query(`UPDATE ${table()} SET created_at = now() - interval '1 hour 10 minutes' WHERE scope = $1 AND key = $2`, [scope, hourAgo])
    await db.pool.query(`UPDATE ${table()} SET created_at = now() - interval '1 day 1 hour' WHERE scope = $1 AND key = $2`, [scope, dayAgo])
    // Over 50 minutes: both aged claims; over 22 hours: only the day-old one.
    expect(await store.countClaimsOlderThan(3_000_000)).toBe(before.hour + 2)
    expect(await store.countClaimsOlderThan(80_000_000)).toBe(before.day + 1)
  })
})

describe('isTransientError', () => {
  const store = () => createPostgresStore({ pool: db.pool, schema: db.schema })

  it('is true for ONCELY_STORE_UNAVAILABLE and for PostgreSQL’s transient failures', () => {
    expect(store().isTransientError(new OncelyError('ONCELY_STORE_UNAVAILABLE', 'gone'))).toBe(true)
    expect(store().isTransientError(Object.assign(new Error('could not serialize access'), { code: '40001' }))).toBe(true)
  })

  it('is false for any other oncely error, a plain error and a statement’s own failure', async () => {
    expect(store().isTransientError(new OncelyError('ONCELY_STORE_UNEXPECTED', 'odd'))).toBe(false)
    expect(store().isTransientError(new Error('boom'))).toBe(false)
    const divisionByZero = await db.pool.query(`SELECT 1/0`).then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(store().isTransientError(divisionByZero)).toBe(false)
  })
})
