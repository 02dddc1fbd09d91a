import { createHash } from 'node:crypto'
import canonicalize from 'canonicalize'
import type { RequestBody } from './request-body.js'

/**
 * The SHA-256 (hex) of an RFC 8785 canonical JSON of method, full URL and body: what an
 * `operationId` is bound to. Headers stay out (tokens rotate, trace ids change per attempt).
 * JSON bodies are canonicalized, so key order and whitespace never cause a false mismatch;
 * text and bytes are taken as they are.
 *
 * @example
 * ```ts
 * import { requestFingerprint } from 'oncely/client'
 * const a = requestFingerprint('POST', 'http://127.0.0.1:3000/v1/charges', { amount: 1000, currency: 'usd' })
 * const b = requestFingerprint('POST', 'http://127.0.0.1:3000/v1/charges', { currency: 'usd', amount: 1000 })
 * // a === b
 * ```
 */
export function requestFingerprint(method: string, url: string, body: RequestBody | undefined): string {
  const rendered = canonicalize({ method: method.toUpperCase(), url, body: describeBody(body) })
  if (rendered === undefined) throw new TypeError('request fingerprint: the body cannot be rendered as JSON')
  return createHash('sha256').update(rendered).digest('hex')
}

function describeBody(body: RequestBody | undefined): unknown {
  if (body === undefined) return null
  if (typeof body === 'string') return { text: body }
  if (body instanceof Uint8Array) return { bytes: Buffer.from(body).toString('base64') }
  return { json: body }
}
