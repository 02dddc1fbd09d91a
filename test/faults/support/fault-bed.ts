import pg from 'pg'
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js'
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js'
import { providerCharges, startProvider, startService, type TestProcess } from '../../helpers/processes.js'
import { charge, type Answer } from '../../service/support/api.js'
import { startHoldingGate, type HoldingGate } from './holding-gate.js'

/**
 * The reference service as a user runs it (real adapters, engine, store, provider process) on
 * this file's own database, reached through a proxy the test can take down. Its connections carry
 * an `application_name` of their own, so the test can find and terminate exactly them.
 */
export interface FaultBed {
  readonly db: TestDatabase
  /** A direct connection (never through the proxy) for terminating backends and taking locks. */
  readonly admin: pg.Client
  readonly proxy: TcpProxy
  readonly gate: HoldingGate
  readonly service: TestProcess
  readonly provider: TestProcess
  readonly api: string
  readonly applicationName: string
  /** The quoted idempotency table. */
  readonly keyTable: string
  close(): Promise<void>
}

/** A request that has no answer after this long hangs, and the test fails naming it. */
export const NO_HANG_MS = 15_000
/** Every key must end completed within this long of the database being back. */
export const RECOVERY_MS = 30_000
/**
 * The service's stale threshold in these tests: short enough that a key whose owner gave up can
 * be taken over within RECOVERY_MS, long enough that no live owner goes stale on a loaded machine.
 */
export const FAULT_STALE_AFTER_MS = 8_000

export async function startFaultBed(name: string): Promise<FaultBed> {
  const db = await createTestDatabase()
  const admin = new pg.Client({ connectionString: db.url })
  await admin.connect()
  const proxy = await startTcpProxy(db.url)
  const provider = await startProvider()
  const gate = await startHoldingGate(provider.url)
  const applicationName = `oncely_fault_${name}`
  const url = new URL(proxy.url)
  url.searchParams.set('application_name', applicationName)
  let service: TestProcess
  try {
    service = await startService({ databaseUrl: url.toString(), schema: db.schema, providerUrl: gate.url, staleAfterMs: FAULT_STALE_AFTER_MS })
  } catch (error) {
    await Promise.all([gate.close(), provider.stop(), proxy.close(), admin.end()])
    await db.close()
    throw error
  }
  return {
    db,
    admin,
    proxy,
    gate,
    service,
    provider,
    api: service.url,
    applicationName,
    keyTable: `"${db.schema.replaceAll('"', '""')}".idempotency_key`,
    async close() {
      await service.stop()
      await gate.close()
      await provider.stop()
      await proxy.close()
      await admin.end()
      await db.close()
    },
  }
}

/** What one request came to: an answer, nothing within NO_HANG_MS, or a connection closed with no answer. */
export type Sent = { key: string; answer: Answer; ms: number } | { key: string; hung: true; ms: number } | { key: string; dropped: string; ms: number }

/** POSTs a charge for `key` and gives up (a hang) after NO_HANG_MS. */
export async function send(bed: FaultBed, user: string, key: string): Promise<Sent> {
  const started = performance.now()
  try {
    const response = await fetch(`${bed.api}/v1/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer demo_${user}`, 'idempotency-key': key },
      body: charge(`cus_${key}`, 1000),
      signal: AbortSignal.timeout(NO_HANG_MS),
    })
    const text = await response.text()
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    return { key, answer: { status: response.status, headers: response.headers, text, json }, ms: performance.now() - started }
  } catch (error) {
    if ((error as Error).name === 'TimeoutError') return { key, hung: true, ms: performance.now() - started }
    // The service closed the connection without answering (it died, or dropped the request).
    return { key, dropped: String((error as Error).cause ?? error), ms: performance.now() - started }
  }
}

/**
 * What a request may be answered while the database fails: 201, or a retryable 409/503 that says
 * when to retry. Never a 500 (docs/reference-service.md), never silence.
 */
export function badAnswers(sent: readonly Sent[]): string[] {
  const bad: string[] = []
  for (const one of sent) {
    if ('hung' in one) {
      bad.push(`${one.key}: no answer after ${NO_HANG_MS} ms`)
      continue
    }
    if ('dropped' in one) {
      bad.push(`${one.key}: connection closed with no answer (${one.dropped})`)
      continue
    }
    const { status, headers, text } = one.answer
    if (status === 201) continue
    if ((status === 503 || status === 409) && Number(headers.get('retry-after')) > 0) continue
    bad.push(`${one.key}: ${status} retry-after=${headers.get('retry-after')} ${text.slice(0, 200)}`)
  }
  return bad
}

/** How each key ended after retrying like a client: its first 201 body, or its history. */
export interface Settled {
  created: Map<string, string>
  stuck: Map<string, string[]>
  hung: string[]
}

/**
 * Retries every key (same key, same body) as a well-behaved client does, honouring Retry-After,
 * until it answers 201 or `withinMs` has passed. A 201 is the first answer or its replay.
 */
export async function settleKeys(bed: FaultBed, user: string, keys: readonly string[], withinMs = RECOVERY_MS): Promise<Settled> {
  const deadline = performance.now() + withinMs
  const created = new Map<string, string>()
  const stuck = new Map<string, string[]>()
  const hung: string[] = []
  await Promise.all(
    keys.map(async (key) => {
      const history: string[] = []
      while (performance.now() < deadline) {
        const sent = await send(bed, user, key)
        if (!('answer' in sent)) {
          hung.push(key)
          return
        }
        const { status, headers, text } = sent.answer
        history.push(String(status))
        if (status === 201) {
          created.set(key, text)
          return
        }
        const wait = Math.max(200, Math.min(2000, 1000 * (Number(headers.get('retry-after')) || 1)))
        await new Promise((resolve) => setTimeout(resolve, wait))
      }
      stuck.set(key, history.slice(-8))
    }),
  )
  return { created, stuck, hung }
}

/** The checks every fault ends with, per key: one charge, one charge row, one completed record, a replay equal to the 201. */
export async function exactlyOnceViolations(bed: FaultBed, user: string, settled: Settled): Promise<string[]> {
  const problems: string[] = []
  const charges = await providerCharges(bed.provider.url, user)
  const { rows: chargeRows } = await bed.admin.query<{ idempotency_key: string; n: number }>(
    'SELECT idempotency_key, count(*)::int AS n FROM oncely_reference.charges WHERE user_id = $1 GROUP BY idempotency_key',
    [user],
  )
  const { rows: records } = await bed.admin.query<{ key: string; status: string }>(`SELECT key, status FROM ${bed.keyTable} WHERE scope = $1`, [user])
  for (const [key, firstBody] of settled.created) {
    const atProvider = charges.filter((c) => c.metadata.idempotency_key === key).length
    if (atProvider !== 1) problems.push(`${key}: ${atProvider} charges at the provider`)
    const rows = chargeRows.find((row) => row.idempotency_key === key)?.n ?? 0
    if (rows !== 1) problems.push(`${key}: ${rows} charge rows in the service's table`)
    const status = records.find((row) => row.key === key)?.status
    if (status !== 'completed') problems.push(`${key}: record is ${status ?? 'missing'}`)
    const replay = await send(bed, user, key)
    if (!('answer' in replay)) problems.push(`${key}: the replay got no answer`)
    else if (replay.answer.status !== 201 || replay.answer.text !== firstBody || replay.answer.headers.get('idempotent-replayed') !== 'true') {
      problems.push(`${key}: the replay is ${replay.answer.status} ${replay.answer.text.slice(0, 120)}, not the first 201`)
    }
  }
  for (const [key, history] of settled.stuck) {
    const said = bed.service
      .stderr()
      .split('\n')
      .filter((line) => line.includes(`"${key}"`))
      .map((line) => line.slice(0, 240))
    problems.push(`${key}: no 201 within ${RECOVERY_MS} ms of the database being back (last answers ${history.join(' ')}); the service logged: ${said.join(' | ') || 'nothing'}`)
  }
  for (const key of settled.hung) problems.push(`${key}: a retry got no answer (hung or dropped)`)
  return problems
}

/** Terminates every backend of the service; resolves to how many there were. */
export async function terminateServiceBackends(bed: FaultBed): Promise<number> {
  await freshActivity(bed)
  const { rows } = await bed.admin.query<{ n: number }>(
    'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()',
    [bed.applicationName],
  )
  return rows[0]?.n ?? 0
}

/**
 * Resolves once `count` backends of the service wait on a lock. Polls pg_stat_activity: the
 * database's own view is the only place to see that a statement has reached the lock.
 */
export async function serviceWaitsOnLocks(bed: FaultBed, count: number, timeoutMs = 20_000): Promise<void> {
  const deadline = performance.now() + timeoutMs
  for (;;) {
    await freshActivity(bed)
    const { rows } = await bed.admin.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
      [bed.applicationName],
    )
    const waiting = rows[0]?.n ?? 0
    if (waiting >= count) return
    if (performance.now() > deadline) throw new Error(`only ${waiting} of ${count} service backends reached the lock`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

/**
 * Drops the admin's copy of pg_stat_activity. Inside a transaction (the tests read it while their
 * own transaction holds a lock) PostgreSQL lists the backends as they were at the first read and
 * updates only their wait events: a connection the service opened after that read, to run a
 * statement that now waits on the lock, would never be seen, nor terminated.
 */
async function freshActivity(bed: FaultBed): Promise<void> {
  await bed.admin.query('SELECT pg_stat_clear_snapshot()')
}

/** Keys `prefix-0` … `prefix-(count-1)`. */
export function keysOf(prefix: string, count: number): string[] {
  return Array.from({ length: count }, (_, index) => `${prefix}-${index}`)
}
