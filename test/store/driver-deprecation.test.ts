import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { beginOf, flight, transaction } from '../../src/store/postgres/statement-runner.js'
import { countingPool } from '../helpers/counting-pool.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// Issue 24 (item 4) and 21: node-postgres 8 deprecates handing a query to a connection still
// executing one (pg 9 refuses it), which the store's flights and transactions did on a connection
// that does not pipeline. They now wait for each answer there themselves, at the same round trips;
// a pipelining connection still takes the whole flight at once. Node warns once per process for a
// deprecation, so this file checks its own warnings and, last, that the check would have seen one.

const DEPRECATED = 'already executing a query'
const warnings: Error[] = []
const onWarning = (warning: Error) => warnings.push(warning)

let db: TestDatabase
beforeAll(async () => {
  process.on('warning', onWarning)
  db = await createTestDatabase()
  await db.pool.query('CREATE TABLE marks (id text PRIMARY KEY)')
})
afterAll(async () => {
  process.off('warning', onWarning)
  await db.close()
})

const mark = (id: string) => ({ text: 'INSERT INTO marks (id) VALUES ($1)', values: [id] })
const deprecations = () => warnings.filter((warning) => warning.name === 'DeprecationWarning' && warning.message.includes(DEPRECATED))
// Warnings are emitted on the next tick: let them land before reading them.
const settled = () => new Promise((resolve) => setImmediate(resolve))

describe('the store on node-postgres uses no deprecated driver behaviour', () => {
  // Round trips: on a plain connection one per statement, as before; pipelining, BEGIN and the
  // statements leave together (and, in a flight, the COMMIT with them).
  const cases = [
    { pipeline: false, flight: 4, transaction: 5 },
    { pipeline: true, flight: 1, transaction: 2 },
  ]
  for (const expected of cases) {
    const kind = expected.pipeline ? 'pipelining' : 'plain'
    it(`a flight of two statements (${kind} connection): committed, no deprecation, ${expected.flight} round trip(s)`, async () => {
      const pool = countingPool(db.newPool(1, { pipeline: expected.pipeline }))
      await flight(pool, ['BEGIN'], 5000, [mark(`flight-${kind}-1`), mark(`flight-${kind}-2`)])
      await settled()
      expect({ deprecations: deprecations().length, statements: pool.statements, roundTrips: pool.roundTrips() }).toEqual({
        deprecations: 0,
        statements: ['BEGIN', 'INSERT INTO', 'INSERT INTO', 'COMMIT'],
        roundTrips: expected.flight,
      })
      expect((await db.pool.query('SELECT id FROM marks WHERE id LIKE $1 ORDER BY id', [`flight-${kind}-%`])).rows).toEqual([{ id: `flight-${kind}-1` }, { id: `flight-${kind}-2` }])
    })

    it(`a transaction whose work sends three writes without awaiting each (${kind} connection): no deprecation, ${expected.transaction} round trips`, async () => {
      const pool = countingPool(db.newPool(1, { pipeline: expected.pipeline }))
      await transaction(pool, beginOf(['BEGIN']), 5000, async (tx) => void (await Promise.all([1, 2, 3].map((n) => tx.query(mark(`tx-${kind}-${n}`))))))
      await settled()
      expect({ deprecations: deprecations().length, statements: pool.statements, roundTrips: pool.roundTrips() }).toEqual({
        deprecations: 0,
        statements: ['BEGIN', 'INSERT INTO', 'INSERT INTO', 'INSERT INTO', 'COMMIT'],
        roundTrips: expected.transaction,
      })
    })
  }

  it('a failing statement on a plain connection: its error is thrown, and the ROLLBACK waits its turn (no deprecation)', async () => {
    const pool = countingPool(db.newPool(1))
    const failure = transaction(pool, beginOf(['BEGIN']), 5000, async (tx) => void (await Promise.all([tx.query(mark('fails-1')), tx.query(mark('fails-1')), tx.query(mark('fails-2'))])))
    await expect(failure).rejects.toMatchObject({ code: '23505' })
    await settled()
    expect({ deprecations: deprecations().length, last: pool.statements.at(-1), marked: (await db.pool.query("SELECT 1 FROM marks WHERE id LIKE 'fails-%'")).rowCount }).toEqual({
      deprecations: 0,
      last: 'ROLLBACK',
      marked: 0,
    })
  })

  // Last: Node warns once per process, so this also proves none of the above was swallowed.
  it('the check sees the deprecation when a plain connection is handed a third query while executing the first (control)', async () => {
    const client = new pg.Client({ connectionString: db.url })
    await client.connect()
    try {
      // The first is executing at once; node-postgres warns when a query finds another queued.
      await Promise.all([client.query('SELECT 1'), client.query('SELECT 2'), client.query('SELECT 3')])
    } finally {
      await client.end()
    }
    await settled()
    expect(deprecations()).toHaveLength(1)
  })
})
