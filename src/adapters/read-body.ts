import type { IncomingMessage } from 'node:http'
import { discardRequestBody, type DiscardLimits } from './discard-body.js'

/** A request body read whole, or refused for its size (`drained`: the rest was read and dropped). */
export type BoundedBody = { kind: 'read'; bytes: Buffer } | { kind: 'too-large'; drained: boolean }

/**
 * Reads a request body of at most `maxBytes`, with a `Content-Length` or chunked. A longer one
 * is refused without being kept: a declared length past the bound before a byte is buffered, a
 * chunked one as soon as it passes it; either way the rest is read and dropped within `limits`
 * (`discardRequestBody`), so the 413 that follows reaches a client still sending instead of a
 * reset, and `drained` says whether the connection can carry another request. Rejects when the
 * request fails while it is read.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http'
 * import { readRequestBody } from 'oncely/node'
 * createServer(async (req, res) => {
 *   const body = await readRequestBody(req, 65_536)
 *   if (body.kind === 'too-large') return void res.writeHead(413, body.drained ? {} : { connection: 'close' }).end()
 *   res.end(`read ${body.bytes.length} bytes`)
 * })
 * ```
 */
export function readRequestBody(req: IncomingMessage, maxBytes: number, limits: DiscardLimits = {}): Promise<BoundedBody> {
  const refuse = () => discardRequestBody(req, limits).then((drained): BoundedBody => ({ kind: 'too-large', drained }))
  if (Number(req.headers['content-length']) > maxBytes) return refuse()
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let length = 0
    const onData = (chunk: Buffer) => {
      length += chunk.length
      if (length <= maxBytes) return void chunks.push(chunk)
      req.off('data', onData).off('end', onEnd).off('error', reject)
      chunks.length = 0
      resolve(refuse())
    }
    const onEnd = () => resolve({ kind: 'read', bytes: Buffer.concat(chunks) })
    req.on('data', onData).once('end', onEnd).once('error', reject)
  })
}
