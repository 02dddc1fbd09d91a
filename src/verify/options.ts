import { invalid, invalidHidden, positiveInteger } from '../option-validation.js'
import { CHECK_IDS, type CheckResult } from './check-result.js'

/** A header as a `[name, value]` pair, or all of them as an object. */
export type HeaderList = ReadonlyArray<readonly [string, string]> | Readonly<Record<string, string>>

/** What `runConformance` is pointed at, and what it may use. */
export interface VerifyOptions {
  /** The guarded endpoint, `http://` or `https://`, with its path and query. */
  url: string | URL
  /** The request method. (Default: `'POST'`) */
  method?: string
  /** The request body the endpoint accepts and runs, sent as is. (Default: none) */
  body?: string
  /** Headers of every request: authentication, content type. Values are never printed. (Default: none; a JSON body gets `content-type: application/json`) */
  headers?: HeaderList
  /** Headers of a second credential, replacing those of the same name; enables `credentials-isolated`. (Default: none) */
  otherHeaders?: HeaderList
  /**
   * A URL that answers with the number of executions so far: a JSON number, `{ "count": N }`,
   * an array or `{ "data": [...] }` (counted). `{key}` in it is replaced by the key, for a probe
   * that counts per key. Enables the execution counts. (Default: none)
   */
  probe?: string
  /** A body the endpoint answers with a 5xx; enables `server-error-not-stored`. (Default: none) */
  failBody?: string
  /** A body that differs from `body` in meaning. (Default: derived from `body`: its first number plus one, else its first string changed) */
  changedBody?: string
  /** How long the endpoint keeps a key; enables `ttl`, which waits that long. (Default: none) */
  ttlMs?: number
  /** Requests in the wide burst. (Default: 50) */
  width?: number
  /** Time for one request. (Default: 10000) */
  timeoutMs?: number
  /** How long a retry after a cut connection keeps retrying a 409. (Default: 30000) */
  retryDeadlineMs?: number
  /** Check ids to run, in the kit's order; the others are left out. (Default: all) */
  only?: readonly string[]
  /** Called with each result as it is decided. (Default: none) */
  onResult?: (result: CheckResult) => void
}

export interface ResolvedVerifyOptions {
  readonly url: URL
  readonly method: string
  readonly body: Buffer | undefined
  readonly headers: ReadonlyArray<readonly [string, string]>
  readonly otherHeaders: ReadonlyArray<readonly [string, string]> | undefined
  readonly probe: string | undefined
  readonly failBody: Buffer | undefined
  readonly changedBody: Buffer | undefined
  readonly ttlMs: number | undefined
  readonly width: number
  readonly timeoutMs: number
  readonly retryDeadlineMs: number
  readonly only: readonly string[] | undefined
  readonly onResult: ((result: CheckResult) => void) | undefined
}

function headerPairs(name: string, list: HeaderList): Array<readonly [string, string]> {
  const pairs = Array.isArray(list) ? (list as ReadonlyArray<readonly [string, string]>) : Object.entries(list as Record<string, string>)
  for (const pair of pairs) {
    if (!Array.isArray(pair) || typeof pair[0] !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(pair[0]) || typeof pair[1] !== 'string') {
      throw invalidHidden(name, 'must be header names and string values', 'a header that is not (values not shown)')
    }
  }
  return pairs.map(([key, value]) => [key, value] as const)
}

function httpUrl(name: string, value: string | URL): URL {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    throw invalidHidden(name, 'must be an absolute http:// or https:// URL', 'something that is not a URL (not shown)')
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid(name, 'must be an http:// or https:// URL', url.protocol)
  return url
}

/** Validates and freezes the options once (docs/conventions.md, "Shape"). */
export function resolveVerifyOptions(options: VerifyOptions): ResolvedVerifyOptions {
  const url = httpUrl('url', options.url)
  const method = options.method ?? 'POST'
  if (!/^[A-Z]+$/.test(method)) throw invalid('method', 'must be an HTTP method in capitals', method)
  const body = options.body === undefined ? undefined : Buffer.from(options.body)
  const headers = headerPairs('headers', options.headers ?? [])
  if (body !== undefined && isJson(options.body) && !headers.some(([name]) => name.toLowerCase() === 'content-type')) headers.push(['content-type', 'application/json'])
  if (headers.some(([name]) => name.toLowerCase() === 'idempotency-key')) throw invalid('headers', 'must not hold Idempotency-Key: the kit sends its own', 'an Idempotency-Key header')
  const otherHeaders = options.otherHeaders === undefined ? undefined : headerPairs('otherHeaders', options.otherHeaders)
  if (options.probe !== undefined) httpUrl('probe', options.probe.replaceAll('{key}', 'k'))
  const ttlMs = options.ttlMs === undefined ? undefined : positiveInteger('ttlMs', options.ttlMs)
  const width = positiveInteger('width', options.width ?? 50)
  if (width < 3) throw invalid('width', 'must be at least 3 (the pair is a check of its own)', width)
  const known = new Set<string>(CHECK_IDS)
  const unknown = options.only?.find((id) => !known.has(id))
  if (unknown !== undefined) throw invalid('only', `must list check ids (${CHECK_IDS.join(', ')})`, unknown)
  return Object.freeze({
    url,
    method,
    body,
    headers: Object.freeze(headers),
    otherHeaders: otherHeaders === undefined ? undefined : Object.freeze(otherHeaders),
    probe: options.probe,
    failBody: options.failBody === undefined ? undefined : Buffer.from(options.failBody),
    changedBody: options.changedBody === undefined ? undefined : Buffer.from(options.changedBody),
    ttlMs,
    width,
    timeoutMs: positiveInteger('timeoutMs', options.timeoutMs ?? 10_000),
    retryDeadlineMs: positiveInteger('retryDeadlineMs', options.retryDeadlineMs ?? 30_000),
    only: options.only === undefined ? undefined : Object.freeze([...options.only]),
    onResult: options.onResult,
  })
}

function isJson(text: string | undefined): boolean {
  try {
    JSON.parse(text ?? '')
    return true
  } catch {
    return false
  }
}
