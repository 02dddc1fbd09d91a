import { hash as digest } from 'node:crypto'
import canonicalize from 'canonicalize'
import { canonicalJson } from './canonical-json.js'

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
  /**
   * The parsed JSON body, raw bytes (`Uint8Array`) for a body that is not JSON, or a string for a
   * text body when `mediaType` says it is not JSON. `undefined` is "no body", which never equals
   * a JSON `null`. (Default: no body)
   */
  body?: unknown
  /**
   * The request's `Content-Type`. Tags a byte or text body with its media type (parameters such as
   * `charset` dropped, case folded), and tells a text body (`text/plain`: a string) from a JSON
   * string (`application/json`, `+json`, or no media type). (Default: none)
   */
  mediaType?: string
}

/** The rule version this release makes fingerprints with; a stored older one is still compared by its own rule. */
export const FINGERPRINT_VERSION = 2

/**
 * SHA-256 (hex) of the RFC 8785 canonical JSON of method, route, path parameters, the chosen
 * query parameters and the body, tagged by its kind (none, JSON, text, bytes) and, for text and
 * bytes, its media type, so no two different requests share a fingerprint (Invariant 5). Equal
 * JSON written differently (key order, whitespace, `1.0` vs `1`) gives the same fingerprint.
 * Nothing volatile goes in: leave dates, trace ids and client timestamps out of the input.
 *
 * The value is versioned, `v2:<hex>`, and carries the previous rule's hash after it
 * (`v2:<hex>;v1:<hex>`), so a key stored by an older release is still compared by the rule that
 * made it: a key in flight during a deploy never turns into a 422. The engine stores only the
 * first part. Treat the value as opaque.
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
  return `${currentFingerprint(input)};v1:${legacyV1(commonParts(input), input.body)}`
}

/**
 * The current rule's part of `fingerprintRequest` alone (`v2:<hex>`): half the hashing. Pass it
 * to `engine.begin` with `earlierFingerprint: () => fingerprintRequest(input)`, and the earlier
 * rule's hash is made only for a key stored by it.
 *
 * @example
 * ```ts
 * import { currentFingerprint, fingerprintRequest } from 'oncely'
 * const input = { method: 'POST', route: '/v1/charges', body: { amount: 1000 } }
 * console.assert(fingerprintRequest(input).startsWith(`${currentFingerprint(input)};`))
 * ```
 */
export function currentFingerprint(input: FingerprintInput): string {
  return `v${FINGERPRINT_VERSION}:${digest('sha256', currentCanonical(input), 'hex')}`
}

/**
 * `canonicalize({ v, method, route, params, query, body: taggedBody(…) })`, byte for byte, with
 * the envelope written here and only its parts canonicalized: the envelope's keys are fixed, so
 * the two objects built to be sorted, their sorting and a `canonicalize` call per part were about
 * half of this function's time (measured alone, issue 21; test/engine/fingerprint-envelope.test.ts
 * compares the two ways on generated requests). Keys in canonicalize's order, which is UTF-16
 * order: body, method, params, query, route, v; kind, value. A body the envelope cannot hold as
 * JSON (a function, a symbol) goes the long way, as it always did.
 */
function currentCanonical(input: FingerprintInput): string {
  const { body } = input
  const json = body !== undefined && !(body instanceof Uint8Array) && (typeof body !== 'string' || input.mediaType === undefined || isJsonMediaType(essenceOf(input.mediaType)))
  if (json && (typeof body === 'function' || typeof body === 'symbol')) return canonical({ v: FINGERPRINT_VERSION, ...commonParts(input), body: taggedBody(body, input.mediaType) })
  const tagged = json ? `{"kind":"json","value":${canonical(body)}}` : canonical(taggedBody(body, input.mediaType))
  return `{"body":${tagged},"method":${canonical(input.method.toUpperCase())},"params":${canonical(input.params ?? {})},"query":${canonical(input.query ?? {})},"route":${canonical(input.route)},"v":${FINGERPRINT_VERSION}}`
}

function commonParts(input: FingerprintInput): Record<string, unknown> {
  return { method: input.method.toUpperCase(), route: input.route, params: input.params ?? {}, query: input.query ?? {} }
}

/** Version 2: the body's kind is part of what is hashed. */
function taggedBody(body: unknown, mediaType: string | undefined): unknown {
  const essence = mediaType === undefined ? undefined : essenceOf(mediaType)
  if (body === undefined) return { kind: 'none' }
  if (body instanceof Uint8Array) return { kind: 'bytes', mediaType: essence ?? null, base64: Buffer.from(body).toString('base64') }
  if (typeof body === 'string' && essence !== undefined && !isJsonMediaType(essence)) return { kind: 'text', mediaType: essence, text: body }
  return { kind: 'json', value: body }
}

/** A media type without its parameters, case folded: `Application/JSON; charset=utf-8` is `application/json`. */
function essenceOf(mediaType: string): string {
  return mediaType.split(';')[0]?.trim().toLowerCase() ?? ''
}

function isJsonMediaType(essence: string): boolean {
  return essence === 'application/json' || essence.endsWith('+json')
}

/** Version 1, as releases before the versioned fingerprint made it (bare hex, kinds untagged). */
function legacyV1(common: Record<string, unknown>, rawBody: unknown): string {
  const body = rawBody instanceof Uint8Array ? { bytes: Buffer.from(rawBody).toString('base64') } : rawBody
  return hash({ ...common, body: body === undefined ? null : body })
}

function hash(value: unknown): string {
  // crypto.hash: one call, no Hash object (a quarter of createHash's CPU on a short text, issue 21).
  return digest('sha256', canonical(value), 'hex')
}

function canonical(value: unknown): string {
  // The values of a parsed JSON body in one pass of our own; anything else as canonicalize writes it.
  const text = canonicalJson(value) ?? canonicalize(value)
  if (text === undefined) throw new TypeError('request fingerprint input cannot be rendered as JSON')
  return text
}

const VERSIONED = /^v(\d+):([0-9a-f]{64})$/
const LEGACY_V1 = /^[0-9a-f]{64}$/

/** The hash of each rule a fingerprint value carries, by version; empty for an opaque value. */
function hashesOf(fingerprint: string): Map<number, string> {
  const hashes = new Map<number, string>()
  for (const part of fingerprint.split(';')) {
    const match = VERSIONED.exec(part)
    if (!match) return new Map()
    // The pattern that matched has both groups.
    hashes.set(Number(match[1]), match[2]!)
  }
  return hashes
}

/** What the engine stores for a request's fingerprint: its current rule's part only. */
export function storedFingerprint(fingerprint: string): string {
  // A value of one part is stored as it is, versioned or not: what the adapters pass (issue 21).
  if (!fingerprint.includes(';')) return fingerprint
  const first = fingerprint.split(';')[0] ?? fingerprint
  return hashesOf(fingerprint).size > 0 ? first : fingerprint
}

/**
 * Whether a stored fingerprint and a request's fingerprint name the same request: compared by
 * the rule the stored one was made with (a bare 64-hex value is version 1), using the hash of
 * that rule the request's value carries. Values that are not versioned fingerprints (a custom
 * fingerprint) compare as plain strings.
 *
 * @example
 * ```ts
 * import { fingerprintRequest, fingerprintsMatch } from 'oncely'
 * const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 1 } })
 * console.assert(fingerprintsMatch(fingerprint.split(';')[0]!, fingerprint))
 * ```
 */
export function fingerprintsMatch(stored: string, incoming: string): boolean {
  if (stored === incoming) return true
  // An opaque incoming value carries no hashes, so nothing below matches it.
  const incomingHashes = hashesOf(incoming)
  const version = LEGACY_V1.test(stored) ? { number: 1, hash: stored } : versionOf(stored)
  return version !== undefined && incomingHashes.get(version.number) === version.hash
}

function versionOf(stored: string): { number: number; hash: string } | undefined {
  const match = VERSIONED.exec(stored)
  return match ? { number: Number(match[1]), hash: match[2]! } : undefined
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

