import { createHash } from 'node:crypto'
import canonicalize from 'canonicalize'

/** The parts of a request that decide whether a repeat is "the same request". */
export interface FingerprintInput {
  /** HTTP method, any case. */
  method: string
  /** The route pattern (`/v1/charges/:id`), not the raw path: the path's values go in `params`. */
  route: string
  /** Path parameters. (Default: none) */
  params?: Readonly<Record<string, string>>
  /**
   * Only the query parameters that change the meaning of the request; pick them with
   * `pickQuery`. Tracking or cache-busting parameters stay out. (Default: none)
   */
  query?: Readonly<Record<string, string | readonly string[]>>
  /** The parsed JSON body, or raw bytes for a body that is not JSON. (Default: no body) */
  body?: unknown
}

/**
 * SHA-256 (hex) of the RFC 8785 canonical JSON of method, route, path parameters, the chosen
 * query parameters and the body (Invariant 5). Equal JSON written differently (key order,
 * whitespace, `1.0` vs `1`) gives the same fingerprint. Nothing volatile goes in: leave dates,
 * trace ids and client timestamps out of the input.
 *
 * @example
 * ```ts
 * import { fingerprintRequest } from 'oncely'
 * const a = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1000, currency: 'usd' } })
 * const b = fingerprintRequest({ method: 'post', route: '/v1/charges', body: { currency: 'usd', amount: 1000 } })
 * console.assert(a === b)
 * ```
 */
export function fingerprintRequest(input: FingerprintInput): string {
  const body = input.body instanceof Uint8Array ? { bytes: Buffer.from(input.body).toString('base64') } : input.body
  const canonical = canonicalize({
    method: input.method.toUpperCase(),
    route: input.route,
    params: input.params ?? {},
    query: input.query ?? {},
    body: body === undefined ? null : body,
  })
  if (canonical === undefined) throw new TypeError('request fingerprint input cannot be rendered as JSON')
  return createHash('sha256').update(canonical).digest('hex')
}

/**
 * Keeps only the named query parameters, so that the rest (tracking, cache busting) never
 * makes a retry look like a different request.
 */
export function pickQuery(
  query: Readonly<Record<string, string | readonly string[] | undefined>>,
  names: readonly string[],
): Record<string, string | readonly string[]> {
  const picked: Record<string, string | readonly string[]> = {}
  for (const name of names) {
    const value = query[name]
    if (value !== undefined) picked[name] = value
  }
  return picked
}

/** Whether a stored fingerprint and a request's fingerprint name the same request. */
export function fingerprintsMatch(stored: string, incoming: string): boolean {
  return stored === incoming
}
