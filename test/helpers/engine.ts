import { randomUUID } from 'node:crypto'
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import pg from 'pg'
import { ENGINE_EVENTS, createEngine, engineChannelName, type ClaimState, type EngineEvent, type Decision, type Engine, type EngineOptions, type Execution, type IdempotencyStore } from '../../src/index.js'
import { createPostgresStore, type PostgresStore, type Queryable } from '../../src/store/postgres/index.js'
import { latch } from './deferred.js'
import type { TestDatabase } from './db.js'

/** An engine on the test database's pool. */
export function engineOn(
  db: TestDatabase,
  options: Omit<EngineOptions<Queryable>, 'store'> = {},
  pool: pg.Pool = db.pool,
): { engine: Engine<Queryable>; store: PostgresStore } {
  const store = createPostgresStore({ pool, schema: db.schema })
  return { engine: createEngine({ store, ...options }), store }
}

/**
 * `count` engines, each on its own pool of one connection, all connected before `work` starts
 * on every one at once: a race between real parallel connections (docs/conventions.md, Tests). The pools
 * stay open for what the test does next with the results; `close()` ends them, since CI's
 * PostgreSQL allows 100 connections in all.
 */
export async function raceEngines<T>(
  db: TestDatabase,
  count: number,
  options: Omit<EngineOptions<Queryable>, 'store'>,
  work: (engine: Engine<Queryable>, index: number) => Promise<T>,
): Promise<{ results: T[]; close(): Promise<void> }> {
  const pools = Array.from({ length: count }, () => new pg.Pool({ connectionString: db.url, max: 1 }))
  const close = async () => {
    await Promise.all(pools.map((pool) => pool.end()))
  }
  try {
    // Connect every pool first, so the race is on the database and not on connection set-up.
    await Promise.all(pools.map(async (pool) => (await pool.connect()).release()))
    const engines = pools.map((pool) => engineOn(db, options, pool).engine)
    const start = latch(count)
    const results = await Promise.all(
      engines.map(async (engine, index) => {
        await start.arrive()
        return work(engine, index)
      }),
    )
    return { results, close }
  } catch (error) {
    await close()
    throw error
  }
}

/** A stored response with a JSON body written exactly as given. */
/** The execution of a decision that must be `execute` (the key was free or taken over). */
export function owned<Tx = Queryable>(decision: Decision<Tx>): Execution<Tx> {
  if (decision.kind !== 'execute') throw new Error(`expected execute, got ${decision.kind}`)
  return decision.execution
}

export function jsonResponse(status: number, bodyText: string) {
  return { status, headers: [['content-type', 'application/json']] as [string, string][], body: Buffer.from(bodyText) }
}

/** The quoted idempotency table of the test database's schema, for assertions in SQL. */
export function keyTable(db: TestDatabase): string {
  return `"${db.schema.replaceAll('"', '""')}".idempotency_key`
}

/** Makes a claim look abandoned: its lease last renewed an hour ago, as if its worker died. */
export async function ageClaim(db: TestDatabase, scope: string, key: string): Promise<void> {
  await db.pool.query(`UPDATE ${keyTable(db)} SET locked_at = now() - interval '1 hour' WHERE scope = $1 AND key = $2`, [scope, key])
}

/**
 * Claims a key through the store alone, with no engine and so no lease timer: a claim whose owner
 * is gone once it is aged. `claimed` when the key was free.
 */
export async function storeClaim(
  store: IdempotencyStore<Queryable>,
  request: { scope: string; key: string; fingerprint: string; ttlMs?: number },
): Promise<{ kind: 'claimed'; claim: ClaimState } | { kind: 'existing' }> {
  const attempt = await store.claim({ ttlMs: 86_400_000, ...request, claimId: randomUUID(), fenceToken: randomUUID() })
  return attempt.kind === 'inserted' ? { kind: 'claimed', claim: attempt.claim } : { kind: 'existing' }
}

/** Records, through a real `node:diagnostics_channel` subscriber, every oncely event published while `work` runs. */
export async function recordEvents(work: () => Promise<void>): Promise<EngineEvent[]> {
  const events: EngineEvent[] = []
  const listener = (message: unknown) => events.push(message as EngineEvent)
  for (const event of ENGINE_EVENTS) subscribe(engineChannelName(event), listener)
  try {
    await work()
  } finally {
    for (const event of ENGINE_EVENTS) unsubscribe(engineChannelName(event), listener)
  }
  return events
}
