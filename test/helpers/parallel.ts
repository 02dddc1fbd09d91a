import pg from 'pg'
import { latch } from './deferred.js'

/**
 * Opens `count` real connections, waits until all are connected, then runs `work` on each at
 * once: a race on the database, not on the event loop. Style rule 18: at least 20 wide.
 */
export async function onParallelConnections<T>(url: string, count: number, work: (client: pg.Client, index: number) => Promise<T>): Promise<T[]> {
  const clients = Array.from({ length: count }, () => new pg.Client({ connectionString: url }))
  await Promise.all(clients.map((client) => client.connect()))
  const start = latch(count)
  try {
    return await Promise.all(
      clients.map(async (client, index) => {
        await start.arrive()
        return work(client, index)
      }),
    )
  } finally {
    await Promise.all(clients.map((client) => client.end()))
  }
}
