import { createHash } from 'node:crypto'
import canonicalize from 'canonicalize'
import { OncelyError } from '../errors.js'
import { encodeBody, type FingerprintBody, type RequestBody } from './request-body.js'

/**
 * The SHA-256 (hex) of an RFC 8785 canonical JSON of method, full URL and body: what an
 * `operationId` is bound to. Headers stay out (tokens rotate, trace ids change per attempt).
 * A JSON body (an object, or a string sent under a JSON `contentType`) is taken by its canonical
 * parse, so key order and whitespace never cause a false mismatch; any other body by the SHA-256
 * of the bytes sent.
 *
 * @example
 * ```ts
 * import { requestFingerprint } from 'oncely/client'
 * const a = requestFingerprint('POST', 'http://127.0.0.1:3000/v1/charges', { amount: 1000, currency: 'usd' })
 * const b = requestFingerprint('POST', 'http://127.0.0.1:3000/v1/charges', '{ "currency": "usd", "amount": 1000 }', 'application/json')
 * // a === b
 * ```
 */
export function requestFingerprint(method: string, url: string, body: RequestBody | undefined, contentType?: string): string {
  return fingerprintOf(method, url, encodeBody(body, contentType ?? null).fingerprint)
}

/** The fingerprint of a body already rendered by `encodeBody`. */
export function fingerprintOf(method: string, url: string, body: FingerprintBody): string {
  const rendered = canonicalize({ method: method.toUpperCase(), url, body })
  if (rendered === undefined) throw new OncelyError('ONCELY_INVALID_OPTION', 'oncely client: the body cannot be rendered as canonical JSON')
  return createHash('sha256').update(rendered).digest('hex')
}
