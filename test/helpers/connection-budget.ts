import pg from 'pg'
import { inject } from 'vitest'

/**
 * The suite's share of the server's connections. Three files run at a time, and a few of them
 * hold 50 to 75 connections at once (races on real connections, three API processes), so two of
 * those together exhaust a stock PostgreSQL (`max_connections` 100): every request then meets
 * SQLSTATE 53300, which the service retries as transient, and CI saw a 1,000-request burst time
 * out so. Each test file reserves the most connections it holds at once (its pools and the
 * processes it starts) before it makes its database, and waits, first come first served, until
 * they fit beside what the files running now reserved. A file larger than the whole budget runs
 * when nothing else holds any.
 *
 * The reservations are rows of a table of the admin database (made by test/setup/global-setup.ts),
 * each owned by the backend of its holder's connection: a worker that dies takes its connection,
 * and so its reservation, with it.
 */
export interface ConnectionBudget {
  /** The table of reservations, quoted. */
  table: string
  /** How many connections the files may hold at once, all reservations together. */
  limit: number
}

/** What a file holds unless it says otherwise: a pool of 10 and a reference service's pool of 20 beside it, at most. */
export const DEFAULT_FILE_CONNECTIONS = 25

const POLL_MS = 100

let held: { count: number; reservation: Reservation; connections: number } | undefined

/**
 * Waits until `connections` fit in the suite's budget and reserves them; the function it
 * resolves to gives them back. Nested reservations in one process (a file that makes a second
 * database) share the first one's.
 */
export async function reserveConnections(connections: number): Promise<() => Promise<void>> {
  if (held !== undefined) {
    held.count++
    if (connections > held.connections) process.stderr.write(`oncely tests: a nested reservation of ${connections} connections exceeds this process's ${held.connections}\n`)
    return release
  }
  const reservation = await reserve(inject('adminUrl'), inject('connectionBudget'), connections)
  held = { count: 1, reservation, connections }
  return release
}

async function release(): Promise<void> {
  if (held === undefined || --held.count > 0) return
  const { reservation } = held
  held = undefined
  await reservation.release()
}

export interface Reservation {
  /** The holder's backend, which owns the reservation's row. */
  readonly pid: number
  release(): Promise<void>
}

/**
 * One reservation of `connections` from `budget`, on a connection of its own to `adminUrl`,
 * once it is granted (`granted`).
 */
export async function reserve(adminUrl: string, budget: ConnectionBudget, connections: number, pollMs = POLL_MS): Promise<Reservation> {
  if (!Number.isInteger(connections) || connections < 1) throw new Error(`reserveConnections: a positive whole number of connections, not ${connections}`)
  const holder = new pg.Client({ connectionString: adminUrl })
  // A holder's lost connection only gives its reservation back (its row goes with its backend).
  holder.on('error', () => undefined)
  await holder.connect()
  try {
    const { rows } = await holder.query<{ id: number; pid: number }>(
      `INSERT INTO ${budget.table} (pid, connections) VALUES (pg_backend_pid(), $1) RETURNING id, pid`,
      [connections],
    )
    const { id, pid } = rows[0]!
    while (!(await granted(holder, budget, id))) await new Promise((resolve) => setTimeout(resolve, pollMs))
    return {
      pid,
      async release() {
        // Its backend's end drops the reservation (see `granted`); deleting it first frees it at once.
        await holder.query(`DELETE FROM ${budget.table} WHERE id = $1`, [id])
        await holder.end()
      },
    }
  } catch (error) {
    await holder.end()
    throw error
  }
}

/**
 * Grants reservation `id` when every earlier one is granted (first come, first served, so a large
 * file is not starved by small ones arriving after it) and it fits. Reservations whose backend is
 * gone are dropped first.
 */
async function granted(holder: pg.Client, budget: ConnectionBudget, id: number): Promise<boolean> {
  await holder.query('BEGIN')
  try {
    await holder.query(`LOCK TABLE ${budget.table} IN SHARE ROW EXCLUSIVE MODE`)
    await holder.query(`DELETE FROM ${budget.table} r WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.pid)`)
    const { rowCount } = await holder.query(
      `UPDATE ${budget.table} SET granted = true
        WHERE id = $1
          AND NOT EXISTS (SELECT 1 FROM ${budget.table} WHERE NOT granted AND id < $1)
          AND (connections + (SELECT coalesce(sum(connections), 0) FROM ${budget.table} WHERE granted) <= $2
               OR NOT EXISTS (SELECT 1 FROM ${budget.table} WHERE granted))`,
      [id, budget.limit],
    )
    await holder.query('COMMIT')
    return rowCount === 1
  } catch (error) {
    await holder.query('ROLLBACK').catch(() => undefined)
    throw error
  }
}

/** Makes a reservations' table (test/setup/global-setup.ts makes the suite's). */
export async function createReservationsTable(admin: pg.Client, table: string): Promise<void> {
  await admin.query(`DROP TABLE IF EXISTS ${table}`)
  await admin.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, pid int NOT NULL, connections int NOT NULL, granted boolean NOT NULL DEFAULT false)`)
}
