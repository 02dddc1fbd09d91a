import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { trackOpenHandle } from '../../setup/guard-open-handles.js'

/** A side-effect probe, as a user would run one: counts the handler's executions, in total and per key. */
export interface ProbeServer {
  /** `GET` answers `{"count": N}`, every execution. */
  readonly totalUrl: string
  /** `GET` with `{key}` replaced answers that key's executions. */
  readonly perKeyUrl: string
  record(key: string | undefined): void
  close(): Promise<void>
}

export async function startProbeServer(): Promise<ProbeServer> {
  let total = 0
  const perKey = new Map<string, number>()
  const server: Server = createServer((req, res) => {
    const key = /^\/count\/(.+)$/.exec(req.url ?? '')?.[1]
    const count = key === undefined ? total : (perKey.get(decodeURIComponent(key)) ?? 0)
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ count }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const untrack = trackOpenHandle('verify probe server')
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    totalUrl: `${base}/count`,
    perKeyUrl: `${base}/count/{key}`,
    record(key) {
      total++
      if (key !== undefined) perKey.set(key, (perKey.get(key) ?? 0) + 1)
    },
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      untrack()
    },
  }
}
