import { createHash } from 'node:crypto'
import canonicalize from 'canonicalize'
import { invalidHidden } from '../option-validation.js'
import { encodeBody, type FingerprintBody, type RequestBody } from './request-body.js'

/**
 * The fingerprint of one client operation, what its `operationId` is bound to in the key store:
 * the SHA-256 (hex) of an RFC 8785 canonical JSON of method, full URL and body. (The server's
 * fingerprint of a request is `fingerprintRequest` from `oncely`; the two are not comparable.)
 * Headers stay out (tokens rotate, trace ids change per attempt). A JSON body (an object, or a
 * string sent under a JSON `contentType`) is taken by its canonical parse, so key order and
 * whitespace never cause a false mismatch; any other body by the SHA-256 of the bytes sent.
 *
 * @example
 * ```ts
 * import { fingerprintOperation } from 'oncely/client'
 * const a = fingerprintOperation('POST', 'http://127.0.0.1:3000/v1/charges', { amount: 1000, currency: 'usd' })
 * const b = fingerprintOperation('POST', 'http://127.0.0.1:3000/v1/charges', '{ "currency": "usd", "amount": 1000 }', 'application/json')
 * // a === b
 * ```
 */
export function fingerprintOperation(method: string, url: string, body: RequestBody | undefined, contentType?: string): string {
  return fingerprintOf(method, url, encodeBody(body, contentType ?? null).fingerprint())
}

/**
 * The old name of `fingerprintOperation`, the same function.
 *
 * @deprecated Use `fingerprintOperation`. Kept for one release, removed in the one after.
 */
export const requestFingerprint: typeof fingerprintOperation = fingerprintOperation

/** The fingerprint of a body already rendered by `encodeBody`. */
export function fingerprintOf(method: string, url: string, body: FingerprintBody): string {
  const rendered = canonicalize({ method: method.toUpperCase(), url, body })
  if (rendered === undefined) throw invalidHidden('body', 'must be renderable as canonical JSON (RFC 8785)', 'data it cannot render')
  return createHash('sha256').update(rendered).digest('hex')
}
