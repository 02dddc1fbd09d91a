import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createOutbox } from '../../src/outbox/index.js'
import { withTransaction } from '../../src/store/postgres/index.js'
import { runCli } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('oncely relay --once and oncely doctor', () => {
  it('--once publishes what is due to the log (no EVENTS_URL) and exits 0', async () => {
    const outbox = createOutbox({ schema: db.schema })
    await withTransaction(db.pool, async (tx) => {
      await outbox.enqueue(tx, { type: 'cli.once', key: 'k', payload: { n: 1 } })
      await outbox.enqueue(tx, { type: 'cli.once', key: 'k', payload: { n: 2 } })
    })
    const result = await runCli(['relay', '--once'], { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema, EVENTS_URL: '' })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe('published 2, failed 0, dead 0\n')
    expect(result.stderr.match(/event cli\.once \{"id":"[^"]+","type":"cli\.once","occurred_at":"[^"]+","data":\{"n":[12]\}\}/g)).toHaveLength(2)
    expect((await runCli(['relay', '--batch-size', 'many'], { DATABASE_URL: db.url })).code).toBe(2)
  })

  it('doctor covers the outbox and inbox tables', async () => {
    const env = { DATABASE_URL: db.url, ONCELY_SCHEMA: db.schema }
    expect((await runCli(['doctor'], env)).code).toBe(0)
    const quoted = `"${db.schema.replaceAll('"', '""')}"`
    await db.pool.query(`DROP INDEX ${quoted}.outbox_unsent_key_seq`)
    await db.pool.query(`ALTER TABLE ${quoted}.inbox DROP COLUMN processed_at CASCADE`)
    const report = await runCli(['doctor'], env)
    expect(report.code).toBe(1)
    expect(report.stdout).toContain('outbox_unsent_key_seq')
    expect(report.stdout).toContain('inbox.processed_at')
  })
})
