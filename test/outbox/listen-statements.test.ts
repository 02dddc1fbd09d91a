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

  it('refuses a channel that cannot be an identifier, naming it', () => {
    expect(() => buildListenStatements('')).toThrow(/^option channel must be a non-empty string/)
  })
})
