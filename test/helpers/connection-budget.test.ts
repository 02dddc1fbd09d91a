import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inject } from 'vitest'
import { createReservationsTable, reserve, type ConnectionBudget, type Reservation } from './connection-budget.js'

// The suite's connection budget (test/helpers/connection-budget.ts), on a table of its own with a
// limit of 10: what fits is granted, what does not waits its turn, first come first served.
let admin: pg.Client
let budget: ConnectionBudget
const adminUrl = inject('adminUrl')
const POLL_MS = 10

beforeAll(async () => {
  admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  budget = { table: `oncely_test_budget_case_${randomBytes(4).toString('hex')}`, limit: 10 }
  await createReservationsTable(admin, budget.table)
})
afterAll(async () => {
  await admin.query(`DROP TABLE IF EXISTS ${budget.table}`)
  await admin.end()
})

const take = (connections: number) => reserve(adminUrl, budget, connections, POLL_MS)

/** The reservations in line, in order, with whether each is granted. */
async function queue(): Promise<{ connections: number; granted: boolean }[]> {
  const { rows } = await admin.query<{ connections: number; granted: boolean }>(`SELECT connections, granted FROM ${budget.table} ORDER BY id`)
  return rows
}

/** Resolves once `rows` reservations are in line (each has asked at least once). */
async function inLine(rows: number): Promise<void> {
  while ((await queue()).length < rows) await new Promise((resolve) => setTimeout(resolve, POLL_MS))
  // Several polls of each waiting holder, so one that could be granted would have been.
  await new Promise((resolve) => setTimeout(resolve, POLL_MS * 10))
}

function settled(promise: Promise<Reservation>): () => boolean {
  let done = false
  void promise.then(() => (done = true))
  return () => done
}

describe('the connection budget', () => {
  it('grants reservations that fit together at once, and gives them back', async () => {
    const [a, b] = await Promise.all([take(4), take(6)])
    expect((await queue()).sort((x, y) => x.connections - y.connections)).toEqual([
      { connections: 4, granted: true },
      { connections: 6, granted: true },
    ])
    await Promise.all([a.release(), b.release()])
    expect(await queue()).toEqual([])
  })

  it('one that does not fit waits until enough is given back; a later one that would fit waits behind it', async () => {
    const first = await take(8)
    const large = take(6)
    const largeDone = settled(large)
    await inLine(2)
    const small = take(1)
    const smallDone = settled(small)
    await inLine(3)
    expect(largeDone()).toBe(false)
    expect(smallDone()).toBe(false)
    expect(await queue()).toEqual([
      { connections: 8, granted: true },
      { connections: 6, granted: false },
      { connections: 1, granted: false },
    ])
    await first.release()
    const [l, s] = await Promise.all([large, small])
    expect(await queue()).toEqual([
      { connections: 6, granted: true },
      { connections: 1, granted: true },
    ])
    await Promise.all([l.release(), s.release()])
  })

  it('one larger than the whole budget runs once nothing else holds any', async () => {
    const held = await take(3)
    const huge = take(15)
    const hugeDone = settled(huge)
    await inLine(2)
    expect(hugeDone()).toBe(false)
    await held.release()
    await (await huge).release()
    expect(await queue()).toEqual([])
  })

  it('a holder whose connection dies gives its share back: the next in line is granted', async () => {
    const doomed = await take(9)
    const next = take(5)
    await inLine(2)
    await admin.query('SELECT pg_terminate_backend($1)', [doomed.pid])
    const granted = await next
    expect(await queue()).toEqual([{ connections: 5, granted: true }])
    await granted.release()
  })

  it('refuses a count that is not a positive whole number', async () => {
    await expect(take(0)).rejects.toThrow(/positive whole number/)
    await expect(take(2.5)).rejects.toThrow(/positive whole number/)
  })
})
