import type { StoredResponse } from '../engine/types.js'

/** A complete response an adapter sends: status, header pairs, body bytes. */
export interface HttpAnswer {
  status: number
  headers: ReadonlyArray<readonly [string, string]>
  body: Uint8Array
}

/** Stable problem `type` URIs (RFC 9457); clients may branch on them. */
export const PROBLEM_TYPES = Object.freeze({
  keyMissing: 'https://oncely.dev/problems/idempotency-key-missing',
  keyInvalid: 'https://oncely.dev/problems/idempotency-key-invalid',
  keyInUse: 'https://oncely.dev/problems/idempotency-key-in-use',
  keyReused: 'https://oncely.dev/problems/idempotency-key-reused',
  unauthenticated: 'https://oncely.dev/problems/unauthenticated',
  notReplayable: 'https://oncely.dev/problems/response-not-replayable',
  outcomeNotRecorded: 'https://oncely.dev/problems/outcome-not-recorded',
  storeUnavailable: 'https://oncely.dev/problems/idempotency-store-unavailable',
  invalidJson: 'https://oncely.dev/problems/invalid-json',
  bodyTooLarge: 'https://oncely.dev/problems/body-too-large',
})

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'

/** An `application/problem+json` answer (RFC 9457). */
export function problem(
  status: number,
  type: string,
  title: string,
  detail: string,
  extraHeaders: ReadonlyArray<readonly [string, string]> = [],
): HttpAnswer {
  const body = Buffer.from(JSON.stringify({ type, title, status, detail }))
  return { status, headers: [['content-type', PROBLEM_CONTENT_TYPE], ...extraHeaders], body }
}

/** The stored response, verbatim, marked as a replay. */
export function replayAnswer(response: StoredResponse): HttpAnswer {
  return { status: response.status, headers: [...response.headers, ['idempotent-replayed', 'true']], body: response.body }
}

export function conflictAnswer(retryAfterSeconds: number, detail: string): HttpAnswer {
  return problem(409, PROBLEM_TYPES.keyInUse, 'Idempotency-Key in use', detail, [['retry-after', String(retryAfterSeconds)]])
}

/**
 * Headers never stored: hop-by-hop ones, those the server computes for each response, and
 * cookies (a replayed session cookie would outlive its session).
 */
const NOT_STORED = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer',
  'transfer-encoding', 'upgrade', 'date', 'content-length', 'set-cookie', 'idempotent-replayed',
])

export type HeaderValue = string | number | readonly string[] | undefined

/** The header pairs worth replaying, names lower-cased, in the order given. */
export function storableHeaders(headers: Iterable<readonly [string, HeaderValue]>): Array<readonly [string, string]> {
  const pairs: Array<readonly [string, string]> = []
  for (const [rawName, value] of headers) {
    const name = rawName.toLowerCase()
    if (value === undefined || NOT_STORED.has(name)) continue
    if (typeof value === 'object') for (const item of value) pairs.push([name, item])
    else pairs.push([name, String(value)])
  }
  return pairs
}

/** Header pairs as one value per name (repeated names joined with `, `), for frameworks that set headers by name. */
export function headerRecord(headers: ReadonlyArray<readonly [string, string]>): Record<string, string> {
  const record: Record<string, string> = {}
  for (const [name, value] of headers) record[name] = record[name] === undefined ? value : `${record[name]}, ${value}`
  return record
}
