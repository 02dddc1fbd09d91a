import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { deferred, type Deferred } from '../../helpers/deferred.js'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

/**
 * A proxy in front of the provider process, in the test's own process: it records the keys the
 * service sends, and can hold a charge until released or drop the connection after the provider
 * answered (the charge happened, the service never hears of it).
 */
export interface Gate {
  readonly url: string
  /** Provider Idempotency-Keys of every charge request, in order. */
  readonly keys: string[]
  /** Holds the next charge request: `arrived` settles when it reaches the gate; `release()` lets it through. */
  holdNext(): { arrived: Promise<void>; release(): void }
  /** The next charge request is forwarded, then its connection dropped with no answer. */
  dropNextAnswer(): void
  close(): Promise<void>
}

export async function startGate(providerUrl: string): Promise<Gate> {
  const keys: string[] = []
  let hold: { arrived: Deferred<void>; release: Deferred<void> } | undefined
  let drop = false
  const target = new URL(providerUrl)

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks)
    const isCharge = req.method === 'POST' && req.url === '/v1/charges'
    let dropThis = false
    if (isCharge) {
      keys.push(String(req.headers['idempotency-key']))
      const held = hold
      hold = undefined
      if (held) {
        held.arrived.resolve()
        await held.release.promise
      }
      dropThis = drop
      drop = false
    }
    const upstream = httpRequest({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers })
    upstream.end(body)
    const answer = await new Promise<IncomingMessage>((resolve, reject) => upstream.once('response', resolve).once('error', reject))
    const answerChunks: Buffer[] = []
    for await (const chunk of answer) answerChunks.push(chunk as Buffer)
    if (dropThis) {
      req.socket.destroy()
      return
    }
    res.writeHead(answer.statusCode ?? 502, answer.headers).end(Buffer.concat(answerChunks))
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const untrack = trackOpenHandle('provider gate')
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    keys,
    holdNext() {
      const next = { arrived: deferred(), release: deferred() }
      hold = next
      return { arrived: next.arrived.promise, release: () => next.release.resolve() }
    },
    dropNextAnswer() {
      drop = true
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => {
          untrack()
          resolve()
        })
        server.closeAllConnections()
      }),
  }
}
