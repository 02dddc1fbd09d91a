import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { engineOn, jsonResponse, keyTable } from '../helpers/engine.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('oncely migrate', () => {
  it('ten concurrent runs of the CLI end with one schema and exit 0', async () => {
    const env = { DATABASE_URL: db.url, ONCELY_SCHEMA: 'CLI Schema' }
    const results = await Promise.all(Array.from({ length: 10 }, () => runCli(['migrate'], env)))
    expect(results.map((r) => r.code)).toEqual(results.map(() => 0))
    expect(results.filter((r) => r.stdout.includes('applied 001_idempotency_key'))).toHaveLength(1)
    const again = await runCli(['migrate', '--schema', 'CLI Schema', '--database-url', db.url], { DATABASE_URL: '' })
    expect(again).toMatchObject({ code: 0, stdout: 'schema "CLI Schema" is current\n' })
  })

  it('--dry-run prints the SQL without a database', async () => {
    const result = await runCli(['migrate', '--dry-run', '--schema', 'Some Schema'], { DATABASE_URL: '' })
    expect(result.code).toBe(0)
    expect(result.stdout).toContain('CREATE TABLE "Some Schema".idempotency_key')
  })

  it('without a database says so and exits 2', async () => {
    const result = await runCli(['migrate'], { DATABASE_URL: '' })
    expect(result.code).toBe(2)
    expect(result.stderr).toMatch(/DATABASE_URL/)
  })
})

describe('oncely doctor', () => {
  it('exits 0 on a current schema, 1 naming each difference after a drift', async () => {
    const env = { DATABASE_URL: db.url, ONCELY_SCHEMA: 'Doctor Schema' }
    expect((await runCli(['doctor'], env)).code).toBe(1)
    expect((await runCli(['migrate'], env)).code).toBe(0)
    const healthy = await runCli(['doctor'], env)
    expect(healthy).toMatchObject({ code: 0, stdout: 'schema "Doctor Schema" matches this version of oncely\n' })
    await db.pool.query('DROP INDEX "Doctor Schema".idempotency_key_expires_at')
    await db.pool.query('ALTER TABLE "Doctor Schema".idempotency_key ADD COLUMN extra text')
    const drifted = await runCli(['doctor', '--json'], env)
    expect(drifted.code).toBe(1)
    const report = JSON.parse(drifted.stdout) as { problems: { kind: string; detail: string }[] }
    expect(report.problems.map((p) => p.kind).sort()).toEqual(['missing', 'unexpected'])
    expect(drifted.stdout).toContain('idempotency_key_expires_at')
    expect(drifted.stdout).toContain('idempotency_key.extra')
  })
})

describe('oncely sweep', () => {
  it('deletes expired keys and prints the count', async () => {
    const { engine } = engineOn(db)
    const fingerprint = fingerprintRequest({ method: 'POST', route: '/x', body: {} })
    for (const key of ['a', 'b', 'c']) {
      const decision = await engine.begin({ scope: 'cli', key, fingerprint })
      if (decision.kind === 'execute') await decision.execution.complete(jsonResponse(201, '{}'))
    }
    await db.pool.query(`UPDATE ${keyTable(db)} SET expires_at = now() - interval '1 second' WHERE scope = 'cli' AND key <> 'c'`)
    const result = await runCli(['sweep', '--batch-size', '1'], { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema })
    expect(result).toMatchObject({ code: 0, stdout: 'deleted 2 expired keys in 3 batches\n' })
    expect((await runCli(['sweep', '--batch-size', 'lots'], { DATABASE_URL: db.url })).code).toBe(2)
  })
})

describe('oncely help', () => {
  it('lists every command, and each answers --help', async () => {
    const help = await runCli(['help'])
    expect(help.code).toBe(0)
    for (const name of ['migrate', 'sweep', 'doctor']) {
      expect(help.stdout).toContain(name)
      const own = await runCli([name, '--help'])
      expect(own.code).toBe(0)
      expect(own.stdout).toMatch(/^usage: oncely /)
      expect(own.stdout).toMatch(/exit codes/)
    }
  })

  it('an unknown command or flag exits 2 on stderr', async () => {
    expect(await runCli(['frobnicate'])).toMatchObject({ code: 2, stdout: '' })
    const badFlag = await runCli(['doctor', '--frob'], { DATABASE_URL: db.url })
    expect(badFlag.code).toBe(2)
    expect(badFlag.stderr).toMatch(/--frob/)
  })
})
