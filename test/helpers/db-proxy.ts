import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../setup/guard-open-handles.js'

export interface DatabaseProxy {
  /** The test database's URL, through the proxy. */
  readonly url: string
  /** Cuts every open connection and refuses new ones, as a database restart does. */
  cut(): void
  /** Accepts connections again, and forwards answers again after `stall`. */
  restore(): void
  /**
   * Keeps every connection open but forwards no answer from the server: a database that stopped
   * answering without closing anything (only a client-side timeout notices).
   */
  stall(): void
  /**
   * Once: the next statement whose bytes contain `marker` (a prepared statement's name, or SQL
   * text) reaches the server and runs; its answer is dropped and the connection cut, as when a
   * connection dies after the commit. Resolves when the cut happened. With `until`, the cut
   * waits for the first answer whose bytes contain it (dropping all answers before it): for a
   * pipelined flight, `'COMMIT'` cuts only once its COMMIT has been answered.
   */
  dropNextAnswerTo(marker: string, until?: string): Promise<void>
  /**
   * Once: the next statement whose bytes contain `marker` is held in the proxy, with everything
   * its client sends after it, and reaches the server only when `release()` is called, or, with
   * `until`, the moment any connection sends bytes containing `until` (the held bytes go first).
   * The server's side of that connection stays open while it holds, even if the client gives up
   * and closes its side: the statement lands late, after its client stopped waiting, as behind a
   * slow network or a stalled middlebox. `held` resolves once a statement is held.
   */
  holdNext(marker: string, until?: string): { held: Promise<void>; release(): void }
  close(): Promise<void>
}

/**
 * A real TCP proxy in front of the test's PostgreSQL, to take the database away from a pool and
 * give it back without touching the machine's shared server.
 */
export async function startDatabaseProxy(databaseUrl: string): Promise<DatabaseProxy> {
  const upstream = new URL(databaseUrl)
  const upstreamPort = Number(upstream.port || 5432)
  const sockets = new Set<net.Socket>()
  let down = false
  let stalled = false
  let armed: { marker: Buffer; until: Buffer | undefined; cut: () => void } | undefined
  let holding: { marker: Buffer; until: Buffer | undefined; onHeld: () => void; release?: () => void } | undefined
  const server = net.createServer((client) => {
    if (down) {
      client.resetAndDestroy()
      return
    }
    const server = net.connect(upstreamPort, upstream.hostname)
    for (const socket of [client, server]) {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
      socket.on('error', () => {
        client.destroy()
        server.destroy()
      })
    }
    let dropNext = false
    let held: Buffer[] | undefined
    let clientGone = false
    client.on('data', (chunk: Buffer) => {
      if (held) {
        held.push(chunk)
        return
      }
      const waiting = holding
      if (waiting?.release && waiting.until && chunk.includes(waiting.until)) {
        holding = undefined
        waiting.release()
      }
      if (waiting && !waiting.release && chunk.includes(waiting.marker)) {
        const buffered: Buffer[] = [chunk]
        held = buffered
        waiting.release = () => {
          if (held !== buffered) return
          held = undefined
          for (const bytes of buffered) server.write(bytes)
          if (clientGone) server.end()
        }
        waiting.onHeld()
        return
      }
      if (armed && chunk.includes(armed.marker)) {
        dropNext = true
        const { cut, until } = armed
        armed = undefined
        const cutOnAnswer = (answer: Buffer) => {
          if (until !== undefined && !answer.includes(until)) return
          server.off('data', cutOnAnswer)
          client.resetAndDestroy()
          server.destroy()
          cut()
        }
        server.on('data', cutOnAnswer)
      }
      server.write(chunk)
    })
    server.on('data', (chunk: Buffer) => {
      if (!dropNext && !stalled) client.write(chunk)
    })
    client.on('close', () => {
      clientGone = true
      // A held statement still reaches the server on release; the server's side waits for it.
      if (!held) server.destroy()
    })
    server.on('close', () => client.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const untrack = trackOpenHandle(`database proxy on port ${port}`)
  const proxied = new URL(databaseUrl)
  proxied.hostname = '127.0.0.1'
  proxied.port = String(port)
  return {
    url: proxied.toString(),
    cut() {
      down = true
      for (const socket of sockets) socket.resetAndDestroy()
    },
    restore() {
      down = false
      stalled = false
    },
    stall() {
      stalled = true
    },
    dropNextAnswerTo(marker: string, until?: string) {
      return new Promise<void>((resolve) => {
        armed = { marker: Buffer.from(marker), until: until === undefined ? undefined : Buffer.from(until), cut: resolve }
      })
    },
    holdNext(marker: string, until?: string) {
      let onHeld!: () => void
      const held = new Promise<void>((resolve) => (onHeld = resolve))
      const hold: NonNullable<typeof holding> = { marker: Buffer.from(marker), until: until === undefined ? undefined : Buffer.from(until), onHeld }
      holding = hold
      return {
        held,
        release() {
          if (holding === hold) holding = undefined
          hold.release?.()
        },
      }
    },
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())))
      untrack()
    },
  }
}
