import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildListenStatements, outboxChannel } from '../../src/store/postgres/statements-outbox.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// The relay's wake-up: it LISTENs on its schema's channel and UNLISTENs when it stops (issue 13:
// these statements run only in the relay's child-process tests, which cannot kill a mutant).

let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

describe('buildListenStatements', () => {
  it('LISTEN hears a NOTIFY on the channel, quoted however it is spelled, and UNLISTEN stops it', async () => {
    const channel = outboxChannel('Billing "EU"')
    const { listen, unlisten } = buildListenStatements(channel)
    const listener = new pg.Client({ connectionString: db.url })
    await listener.connect()
    try {
      const heard: string[] = []
      listener.on('notification', (message) => heard.push(message.channel))
      await listener.query(listen)
      await db.pool.query('SELECT pg_notify($1, $2)', [channel, 'wake'])
      // A round trip on the listener delivers what was notified before it.
      await listener.query('SELECT 1')
      expect(heard).toEqual([channel])
      await listener.query(unlisten)
      await db.pool.query('SELECT pg_notify($1, $2)', [channel, 'wake'])
      await listener.query('SELECT 1')
      expect(heard).toEqual([channel])
    } finally {
      await listener.end()
    }
  })

  it("a schema whose name is long, in any script, still gets a channel NOTIFY takes: at most PostgreSQL's 63 bytes, cut between characters, heard by LISTEN", async () => {
    const channels = [outboxChannel(`tenant_${'x'.repeat(80)}`), outboxChannel(`mandant_${'é'.repeat(40)}`), outboxChannel(`租户_${'账'.repeat(30)}`)]
    expect(channels.map((channel) => Buffer.byteLength(channel) <= 63 && Buffer.byteLength(channel) > 60)).toEqual([true, true, true])
    expect(channels[1]).toBe(`oncely_outbox:mandant_${'é'.repeat(20)}`)
    const listener = new pg.Client({ connectionString: db.url })
    await listener.connect()
    try {
      const heard: string[] = []
      listener.on('notification', (message) => heard.push(message.channel))
      for (const channel of channels) await listener.query(buildListenStatements(channel).listen)
      for (const channel of channels) await db.pool.query('SELECT pg_notify($1, $2)', [channel, 'wake'])
      await listener.query('SELECT 1')
      expect(heard).toEqual(channels)
    } finally {
      await listener.end()
    }
  })

  it('refuses a channel that cannot be an identifier, naming it', () => {
    expect(() => buildListenStatements('')).toThrow(/^option channel must be a non-empty string/)
  })
})
