import type { Server } from 'node:http'

/**
 * Makes the kit's bursts overlap for sure: the request that executes waits until every other
 * request of its burst (the kit names its width in `Oncely-Verify: …; width=N`) has had its
 * answer, which can only be a 409 then. Without it a fast handler could finish before the
 * others arrive, they would all be replays, and the Retry-After check would have no 409 to judge.
 * `arrivals` counts the requests that reached the server, by check.
 */
export function burstGate(server: Server, arrivals = new Map<string, number>()): (headers: Record<string, string | string[] | undefined>) => Promise<void> {
  const answered = new Map<string, number>()
  const waiting = new Map<string, Array<() => void>>()
  server.prependListener('request', (req, res) => {
    // Requests that reached the server, by the kit's check (the start of its Oncely-Verify header).
    const check = String(req.headers['oncely-verify'] ?? '').split(';')[0] ?? ''
    arrivals.set(check, (arrivals.get(check) ?? 0) + 1)
    const key = req.headers['idempotency-key']
    if (typeof key !== 'string') return
    res.once('close', () => {
      answered.set(key, (answered.get(key) ?? 0) + 1)
      const woken = waiting.get(key) ?? []
      waiting.delete(key)
      for (const wake of woken) wake()
    })
  })
  return async (headers) => {
    const key = headers['idempotency-key']
    const width = Number(/width=(\d+)/.exec(String(headers['oncely-verify'] ?? ''))?.[1] ?? 1)
    if (typeof key !== 'string' || width < 2) return
    while ((answered.get(key) ?? 0) < width - 1) {
      await new Promise<void>((resolve) => waiting.set(key, [...(waiting.get(key) ?? []), resolve]))
    }
  }
}
