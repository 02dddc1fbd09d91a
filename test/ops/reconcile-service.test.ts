import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { deriveStepKey, fingerprintRequest } from '../../src/index.js'
import { inspectKey } from '../../src/ops/keys.js'
import { providerMetadata } from '../../src/reference-service/responses.js'
import { createServiceTables } from '../../src/reference-service/sql.js'
import { withTransaction } from '../../src/store/postgres/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { ageClaim } from '../helpers/engine.js'
import { deadClaim } from './support/dead-claim.js'
import { providerCharges, startProvider, startService, type ServiceOptions, type TestProcess } from '../helpers/processes.js'
import { get, newUser, post } from '../service/support/api.js'

// Real crashes (docs/conventions.md, Tests). The API SIGKILLs itself between the provider's charge and the
// phase's commit; nobody retries; the restarted service's own reconciler settles the key.
const STALE_AFTER_MS = 1000
const RECONCILE_AFTER_MS = 2000
const INTERVAL_MS = RECONCILE_AFTER_MS / 2
let db: TestDatabase
let provider: TestProcess
let options: ServiceOptions

beforeAll(async () => {
  db = await createTestDatabase()
  // The service's own tables, for the tests that settle keys without starting it.
  await withTransaction(db.pool, createServiceTables)
  provider = await startProvider()
  options = { databaseUrl: db.url, schema: db.schema, providerUrl: provider.url, staleAfterMs: STALE_AFTER_MS, chaos: true, env: { RECONCILE_AFTER_MS: String(RECONCILE_AFTER_MS) } }
})

afterAll(async () => {
  await provider?.stop()
  await db?.close()
})

async function crash(user: string, key: string, point: 'after-claim' | 'after-provider', serviceOptions = options): Promise<number> {
  const doomed = await startService(serviceOptions)
  await post(doomed.url, { user, key, headers: { 'x-chaos-crash': point } }).catch(() => undefined)
  expect((await doomed.exited).signal).toBe('SIGKILL')
  return Date.now()
}

/** Polls the record (never the API: no client retry) until the key leaves in_progress. */
async function settled(user: string, key: string, deadlineMs: number) {
  const target = { pool: db.pool, schema: db.schema }
  for (let started = Date.now(); Date.now() - started < deadlineMs; ) {
    const details = await inspectKey(target, { scope: user, key, staleAfterMs: STALE_AFTER_MS })
    if (details && details.status !== 'in_progress') return { details, afterMs: Date.now() - started }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return { details: await inspectKey(target, { scope: user, key, staleAfterMs: STALE_AFTER_MS }), afterMs: deadlineMs }
}

describe('the in-process reconciler of the reference service', () => {
  it('after X-Chaos-Crash: after-provider and a restart, with no client retry, the key settles by itself with exactly one provider charge', async () => {
    const user = newUser()
    const crashedAt = await crash(user, 'lost-answer', 'after-provider')
    expect(await providerCharges(provider.url, user)).toHaveLength(1)
    const restarted = await startService(options)
    try {
      // Eligible RECONCILE_AFTER_MS after the last lease (at most the crash), found at the next tick.
      const budget = Math.max(0, RECONCILE_AFTER_MS - (Date.now() - crashedAt)) + INTERVAL_MS
      const { details, afterMs } = await settled(user, 'lost-answer', budget + 4000)
      expect(details?.status).toBe('completed')
      process.stdout.write(`reconciled ${afterMs} ms after the restart was ready (budget ${budget} ms + scheduling)\n`)
      const [charge] = await providerCharges(provider.url, user)
      const body = JSON.parse(details?.response?.body ?? '{}') as { id: string; provider_charge: string; amount: number }
      expect(details?.response?.status).toBe(201)
      expect(body).toMatchObject({ provider_charge: charge?.id, amount: 1000, status: 'succeeded' })
      // Invariant 8: the reconciler's completion wrote the event a route completion writes.
      const events = await db.pool.query<{ payload: string }>({
        text: `SELECT payload FROM "${db.schema.replaceAll('"', '""')}".outbox WHERE type = 'charge.succeeded'`,
      })
      const charged = events.rows.map((row) => (JSON.parse(row.payload) as { charge: { id: string } }).charge.id)
      expect(charged.filter((id) => id === body.id)).toHaveLength(1)

      // The client comes back: the answer it would have got, replayed; the charge row exists.
      const replay = await post(restarted.url, { user, key: 'lost-answer' })
      expect(replay.status).toBe(201)
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(replay.headers.get('content-type')).toBe('application/json')
      expect(replay.text).toBe(details?.response?.body)
      expect((await get(restarted.url, `/v1/charges/${body.id}`, user)).status).toBe(200)
      expect(await providerCharges(provider.url, user)).toHaveLength(1)
      expect((await get(restarted.url, '/metrics')).text).toMatch(/^oncely_reconciled_total\{decision="completed"\} [1-9]/m)
    } finally {
      await restarted.stop()
    }
  })

  it('after-claim (nothing charged): left suspended with the same claim, and the next retry charges once', async () => {
    const user = newUser()
    await crash(user, 'never-charged', 'after-claim')
    const before = await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'never-charged' })
    const restarted = await startService(options)
    try {
      for (let i = 0; i < 100; i++) {
        const metrics = await get(restarted.url, '/metrics')
        if (/^oncely_reconciled_total\{decision="unresolved"\} [1-9]/m.test(metrics.text)) break
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      const after = await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'never-charged', staleAfterMs: STALE_AFTER_MS })
      expect(after).toMatchObject({ state: 'suspended', claimId: before?.claimId })
      expect(await providerCharges(provider.url, user)).toHaveLength(0)
      const retry = await post(restarted.url, { user, key: 'never-charged' })
      expect(retry.status).toBe(201)
      expect(retry.headers.get('idempotent-replayed')).toBeNull()
      expect(await providerCharges(provider.url, user)).toHaveLength(1)
    } finally {
      await restarted.stop()
    }
  })
})

describe('oncely reconcile', () => {
  it('settles a stuck key on demand and prints each decision; --hook runs a library user hook', async () => {
    // The crash itself is proven above; here the stuck claims are made directly: an owner that
    // charged the provider (with the route's metadata) and died, and one that died before.
    const user = newUser()
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000 } })
    for (const key of ['on-demand', 'own-hook']) {
      const claim = await deadClaim(db, { scope: user, key, fingerprint, fresh: true })
      if (key === 'on-demand') {
        const answer = await fetch(`${provider.url}/v1/charges`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': deriveStepKey({ scope: user, key, claimId: claim.claimId, step: 'charge' }) },
          body: JSON.stringify({ amount: 1000, currency: 'usd', customer: 'cus_ok', metadata: providerMetadata(user, key, claim.claimId) }),
        })
        expect(answer.status).toBe(200)
      }
      await ageClaim(db, user, key)
    }
    const env = { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema, IDEMPOTENCY_STALE_AFTER_MS: String(STALE_AFTER_MS), PROVIDER_URL: provider.url, RECONCILE_AFTER_MS: '' }
    const dir = await mkdtemp(path.join(tmpdir(), 'oncely-hook-'))
    try {
      const hookFile = path.join(dir, 'hook.mjs')
      await writeFile(hookFile, `export default async (claim) => { if (claim.key === 'own-hook') await claim.fail({ status: 410, headers: [['content-type', 'text/plain']], body: Buffer.from('given up by ' + claim.claimId) }) }\n`)
      const own = await runCli(['reconcile', '--hook', hookFile, '--older-than-ms', String(STALE_AFTER_MS), '--json'], env)
      expect(own.code).toBe(0)
      const ownReports = JSON.parse(own.stdout) as Array<{ scope: string; key: string; decision: string }>
      expect(ownReports.filter((r) => r.scope === user).map((r) => [r.key, r.decision]).sort()).toEqual([
        ['on-demand', 'unresolved'],
        ['own-hook', 'failed'],
      ])
      // The suspended claim is reconcilable again once its lease is older than the threshold.
      await ageClaim(db, user, 'on-demand')
      const service = await runCli(['reconcile', '--older-than-ms', String(STALE_AFTER_MS)], env)
      expect(service.code, service.stdout + service.stderr).toBe(0)
      expect(service.stdout).toMatch(new RegExp(`^completed +user=${user} key="on-demand"`, 'm'))
      expect((await inspectKey({ pool: db.pool, schema: db.schema }, { scope: user, key: 'on-demand' }))?.status).toBe('completed')
      expect(await providerCharges(provider.url, user)).toHaveLength(1)
      expect((await runCli(['reconcile', '--older-than-ms', '10'], env)).code).toBe(2)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
