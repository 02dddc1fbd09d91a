import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../setup/guard-open-handles.js'

/**
 * A real TCP proxy on 127.0.0.1, owned by one test, in front of a shared server (PostgreSQL,
 * Redis, a broker, an HTTP service): the faults it makes (a server gone, a server that stops
 * answering, an answer lost on its way back, a statement that lands late) are the test's alone,
 * and the machine's server is never touched. It knows bytes only: a marker is any byte string a
 * request carries (a prepared statement's name, SQL text, an HTTP path).
 */
export interface TcpProxy {
  /** The proxy's port on 127.0.0.1. */
  readonly port: number
  /**
   * The upstream URL with its host and port replaced by the proxy's; given a bare port,
   * `http://127.0.0.1:PORT`.
   */
  readonly url: string
  /** Connections accepted and forwarded so far. */
  connections(): number
  /** Answers cut so far by `cutNextAnswer`. */
  cuts(): number
  /** The server goes away: every open connection is reset, and new ones are reset at once until `restore()`. */
  cut(): void
  /**
   * The server stops answering without closing anything: connections stay open and requests
   * still reach it, but no answer comes back (only a client-side timeout notices) until `restore()`.
   */
  stall(): void
  /** Ends `cut` and `stall`: connections are accepted and answers forwarded again. */
  restore(): void
  /**
   * Once: the next answer the server sends is dropped and its connection cut (both sides reset),
   * as when a connection dies after the server did the work. With `to`, only an answer on a
   * connection after it sent a request containing `to` (the request reaches the server and runs;
   * everything it answers from then on is dropped). With `until`, the cut waits for the first
   * answer containing it, dropping the answers before it: for a pipelined flight, `'COMMIT'` cuts
   * only once its COMMIT has been answered. Calls queue: each cuts one answer. Resolves once cut.
   */
  cutNextAnswer(options?: { to?: string; until?: string }): Promise<void>
  /**
   * Once: the next request containing `marker` is held in the proxy, with everything its client
   * sends after it, and reaches the server only when `release()` is called, or, with `until`, the
   * moment any connection sends bytes containing `until` (the held bytes go first). The server's
   * side of that connection stays open while it holds, even if the client gives up and closes its
   * side: the request lands late, after its client stopped waiting, as behind a slow network or a
   * stalled middlebox. `held` resolves once a request is held.
   */
  holdNext(marker: string, until?: string): { held: Promise<void>; release(): void }
  close(): Promise<void>
}

const DEFAULT_PORTS: Record<string, number> = { 'postgres:': 5432, 'postgresql:': 5432, 'redis:': 6379, 'http:': 80 }

interface AnswerCut {
  readonly to: Buffer | undefined
  readonly until: Buffer | undefined
  readonly done: () => void
}

interface Hold {
  readonly marker: Buffer
  readonly until: Buffer | undefined
  readonly onHeld: () => void
  release?: () => void
}

const bytes = (text: string | undefined) => (text === undefined ? undefined : Buffer.from(text))

/** Starts a proxy in front of `upstream`: a URL (its host and port), or a port on 127.0.0.1. */
export async function startTcpProxy(upstream: string | number): Promise<TcpProxy> {
  const target = typeof upstream === 'number' ? new URL(`http://127.0.0.1:${upstream}`) : new URL(upstream)
  const targetHost = target.hostname
  const targetPort = Number(target.port || DEFAULT_PORTS[target.protocol])
  if (!Number.isInteger(targetPort) || targetPort <= 0) throw new Error(`no port for the proxy's upstream ${target.protocol}//${target.host}`)
  const sockets = new Set<net.Socket>()
  let accepted = 0
  let cutCount = 0
  let down = false
  let stalled = false
  const answerCuts: AnswerCut[] = []
  let holding: Hold | undefined

  const proxy = net.createServer((client) => {
    if (down) return void client.resetAndDestroy()
    accepted++
    const server = net.connect(targetPort, targetHost)
    for (const socket of [client, server]) {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
      socket.on('error', () => {
        client.destroy()
        server.destroy()
      })
    }
    // The answer cut this connection has taken on, once it sent the request it waits for.
    let cutting: AnswerCut | undefined
    let isCut = false
    let held: Buffer[] | undefined
    let clientGone = false

    const cutNow = (plan: AnswerCut) => {
      isCut = true
      client.resetAndDestroy()
      server.destroy()
      cutCount++
      plan.done()
    }

    client.on('data', (chunk: Buffer) => {
      if (held) return void held.push(chunk)
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
          for (const one of buffered) server.write(one)
          if (clientGone) server.end()
        }
        waiting.onHeld()
        return
      }
      if (!cutting) {
        const index = answerCuts.findIndex((plan) => plan.to !== undefined && chunk.includes(plan.to))
        if (index >= 0) cutting = answerCuts.splice(index, 1)[0]
      }
      server.write(chunk)
    })
    server.on('data', (chunk: Buffer) => {
      if (isCut) return
      if (!cutting) {
        const index = answerCuts.findIndex((plan) => plan.to === undefined)
        if (index >= 0) cutting = answerCuts.splice(index, 1)[0]
      }
      if (cutting) {
        if (cutting.until === undefined || chunk.includes(cutting.until)) cutNow(cutting)
        return
      }
      if (!stalled) client.write(chunk)
    })
    client.on('close', () => {
      clientGone = true
      // A held request still reaches the server on release; the server's side waits for it.
      if (!held) server.destroy()
    })
    // What the server sent before it closed still reaches the client (an HTTP server that
    // answers and closes); then the client's side closes too.
    server.on('close', () => {
      if (client.destroyed || client.writableLength === 0) client.destroy()
      else client.end(() => client.destroy())
    })
  })
  await new Promise<void>((resolve, reject) => {
    proxy.once('error', reject)
    proxy.listen(0, '127.0.0.1', () => {
      proxy.off('error', reject)
      resolve()
    })
  })
  const { port } = proxy.address() as AddressInfo
  const untrack = trackOpenHandle(`TCP proxy on port ${port} (to ${targetHost}:${targetPort})`)
  const proxied = new URL(target)
  proxied.hostname = '127.0.0.1'
  proxied.port = String(port)

  return {
    port,
    url: proxied.toString().replace(/\/$/, ''),
    connections: () => accepted,
    cuts: () => cutCount,
    cut() {
      down = true
      for (const socket of sockets) socket.resetAndDestroy()
    },
    stall() {
      stalled = true
    },
    restore() {
      down = false
      stalled = false
    },
    cutNextAnswer(options = {}) {
      return new Promise<void>((done) => answerCuts.push({ to: bytes(options.to), until: bytes(options.until), done }))
    },
    holdNext(marker, until) {
      let onHeld!: () => void
      const held = new Promise<void>((resolve) => (onHeld = resolve))
      const hold: Hold = { marker: Buffer.from(marker), until: bytes(until), onHeld }
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
      await new Promise<void>((resolve, reject) => proxy.close((error) => (error ? reject(error) : resolve())))
      untrack()
    },
  }
}
