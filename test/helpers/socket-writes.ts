import type pg from 'pg'

/**
 * Counts the socket writes (system calls) of the connections `pool` holds now: each one's
 * `_write` (one chunk) and `_writev` (several), which is what a connection's `write` and corked
 * writes come down to. Check out as many connections as the pool may use before counting.
 */
export async function countSocketWrites(pool: pg.Pool, connections = 1): Promise<{ readonly writes: number }> {
  const clients = await Promise.all(Array.from({ length: connections }, () => pool.connect()))
  const counter = { writes: 0 }
  for (const client of clients) {
    const socket = (client as unknown as { connection: { stream: Record<'_write' | '_writev', (...args: unknown[]) => unknown> } }).connection.stream
    for (const method of ['_write', '_writev'] as const) {
      const original = socket[method].bind(socket)
      socket[method] = (...args: unknown[]) => (counter.writes++, original(...args))
    }
    client.release()
  }
  return counter
}
