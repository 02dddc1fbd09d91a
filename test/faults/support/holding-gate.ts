import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { deferred, type Deferred } from '../../helpers/deferred.js'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

/**
 * A proxy in front of the fake provider, in the test's process: it counts every charge call by
 * the provider key it carries, and can hold all charge calls until released, so a test knows
 * that every request it sent is inside its `charge` step (claimed, provider not yet answered).
 */
export interface HoldingGate {
  readonly url: string
  /** Charge calls per provider Idempotency-Key. */
  readonly callsByKey: ReadonlyMap<string, number>
  /** The next `count` charge calls wait at the gate until `release()`. */
  hold(count: number): void
  /** Resolves once `count` charge calls have been held at the gate (released or not). */
  waiting(count: number): Promise<void>
  /** Lets every waiting call through and stops holding. */
  release(): void
  /** Lets the first `count` waiting calls through, in the order they arrived. */
  releaseFirst(count: number): void
  close(): Promise<void>
}

export async function startHoldingGate(providerUrl: string): Promise<HoldingGate> {
  const callsByKey = new Map<string, number>()
  const target = new URL(providerUrl)
  const held: Array<Deferred<void>> = []
  let toHold = 0
  let heldSoFar = 0
  const watchers: Array<{ count: number; reached: Deferred<void> }> = []

  const notify = () => {
    for (const watcher of watchers.splice(0)) {
      if (heldSoFar >= watcher.count) watcher.reached.resolve()
      else watchers.push(watcher)
    }
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    if (req.method === 'POST' && req.url === '/v1/charges') {
      const key = String(req.headers['idempotency-key'])
      callsByKey.set(key, (callsByKey.get(key) ?? 0) + 1)
      if (toHold > 0) {
        toHold--
        const mine = deferred()
        held.push(mine)
        heldSoFar++
        notify()
        await mine.promise
      }
    }
    const upstream = httpRequest({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers })
    upstream.end(Buffer.concat(chunks))
    const answer = await new Promise<IncomingMessage>((resolve, reject) => upstream.once('response', resolve).once('error', reject))
    const answerChunks: Buffer[] = []
    for await (const chunk of answer) answerChunks.push(chunk as Buffer)
    res.writeHead(answer.statusCode ?? 502, answer.headers).end(Buffer.concat(answerChunks))
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const untrack = trackOpenHandle('provider holding gate')
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    callsByKey,
    hold(count) {
      toHold += count
    },
    waiting(count) {
      const reached = deferred()
      watchers.push({ count, reached })
      notify()
      return reached.promise
    },
    release() {
      for (const one of held.splice(0)) one.resolve()
      toHold = 0
    },
    releaseFirst(count) {
      for (const one of held.splice(0, count)) one.resolve()
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const one of held.splice(0)) one.resolve()
        server.close(() => {
          untrack()
          resolve()
        })
        server.closeAllConnections()
      }),
  }
}
