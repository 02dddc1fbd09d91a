import type { IncomingMessage } from 'node:http'

/** How much of a refused body is read and dropped, and for how long, before the socket is given up. */
export interface DiscardLimits {
  /** Bytes read past the point of refusal at most. (Default: 8388608, 8 MiB) */
  maxBytes?: number
  /** Milliseconds spent reading at most. (Default: 5000) */
  maxMs?: number
}

/**
 * Reads the rest of a request body that will not be used and drops it, resolving `true` once the
 * body has ended and `false` when a bound was reached first or the request failed.
 *
 * A server that answers 413 and closes while the client is still sending leaves unread bytes in
 * its socket: the kernel answers them with a reset, and a client such as `fetch` reports
 * `EPIPE`/`fetch failed` instead of the 413 it was sent. Reading the rest first (as nginx's
 * lingering close does) lets the answer arrive; the bounds keep a client that declares gigabytes,
 * or sends slowly, from holding the connection: past them the caller closes it anyway.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http'
 * import { discardRequestBody } from 'oncely/node'
 * createServer(async (req, res) => {
 *   if (Number(req.headers['content-length']) > 65_536) {
 *     const drained = await discardRequestBody(req)
 *     res.writeHead(413, drained ? {} : { connection: 'close' }).end()
 *   }
 * })
 * ```
 */
export function discardRequestBody(req: IncomingMessage, limits: DiscardLimits = {}): Promise<boolean> {
  const maxBytes = limits.maxBytes ?? 8 * 1024 * 1024
  const maxMs = limits.maxMs ?? 5_000
  if (req.readableEnded) return Promise.resolve(true)
  return new Promise((resolve) => {
    let read = 0
    let settled = false
    const settle = (ended: boolean) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      // The error listener stays: an error after this point must not become an uncaught one.
      req.off('data', onData).off('end', onEnd).off('close', onClose)
      if (!ended) req.pause()
      resolve(ended)
    }
    const onData = (chunk: Buffer) => {
      read += chunk.length
      if (read > maxBytes) settle(false)
    }
    const onEnd = () => settle(true)
    const onFailure = () => settle(false)
    // 'close' after 'end' is the normal order; 'close' alone means the client went away.
    const onClose = () => settle(req.readableEnded)
    const timer = setTimeout(onFailure, maxMs)
    req.on('data', onData).once('end', onEnd).once('error', onFailure).once('close', onClose)
    req.resume()
  })
}
