import { createHash } from 'node:crypto'
import { invalidHidden } from '../option-validation.js'
import { renderJson } from './json-body.js'

/**
 * A request body:
 * - a string is sent as its UTF-8 bytes, exactly as given (`text/plain; charset=utf-8` unless
 *   the call sets a content type);
 * - bytes (`Uint8Array`, any other typed array, `DataView`, `ArrayBuffer`) are copied once when
 *   the call starts and sent as they were then (`application/octet-stream`);
 * - `URLSearchParams` is sent as a form (`application/x-www-form-urlencoded;charset=UTF-8`);
 * - a plain object, an array or a JSON scalar is sent as `JSON.stringify` renders it
 *   (`application/json`), and refused where that would change it: NaN, ±Infinity, a function,
 *   a symbol, a bigint, `undefined` in an array, a lone surrogate, an object that is not plain,
 *   a cycle. An `undefined` member is left out; `toJSON` is honoured.
 *
 * A stream, `FormData`, `Blob`, `Map`, `Set` or any other object is refused with
 * `ONCELY_INVALID_OPTION`: a stream cannot be sent again on a retry, a multipart boundary
 * changes per rendering, and the rest would be sent as `{}`.
 */
export type RequestBody = string | ArrayBuffer | ArrayBufferView | URLSearchParams | JsonValue

export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue | undefined }

/** A body rendered once: every attempt sends exactly `bytes`, which nothing else holds. */
export interface EncodedBody {
  readonly bytes: Uint8Array | undefined
  readonly contentType: string | undefined
  /**
   * What the operation's fingerprint holds for this body; see `fingerprintOperation`. Computed
   * on demand: a call without an `operationId` never needs it.
   */
  readonly fingerprint: () => FingerprintBody
}

/** A JSON body is fingerprinted by its canonical form, any other by the SHA-256 of its bytes. */
export type FingerprintBody = null | { readonly json: unknown } | { readonly bytesSha256: string }

const JSON_CONTENT_TYPE = 'application/json'
const FORM_CONTENT_TYPE = 'application/x-www-form-urlencoded;charset=UTF-8'

/**
 * Renders `body` once. `contentType` is the call's own content type, if it sets one: a string
 * body under a JSON content type is sent as typed and fingerprinted by its canonical parse.
 */
export function encodeBody(body: RequestBody | undefined, contentType: string | null = null): EncodedBody {
  if (body === undefined) return { bytes: undefined, contentType: undefined, fingerprint: () => null }
  if (typeof body === 'string') {
    const bytes = Buffer.from(body, 'utf8')
    const typedJson = isJsonContentType(contentType)
    return { bytes, contentType: 'text/plain; charset=utf-8', fingerprint: () => (typedJson ? jsonTextFingerprint(body, bytes) : bytesFingerprint(bytes)) }
  }
  if (ArrayBuffer.isView(body) || body instanceof ArrayBuffer) {
    // Copied once, now: a caller that reuses its buffer during a backoff wait must not change
    // what a retry sends under the same key.
    const bytes = (ArrayBuffer.isView(body) ? new Uint8Array(body.buffer, body.byteOffset, body.byteLength) : new Uint8Array(body)).slice()
    return { bytes, contentType: 'application/octet-stream', fingerprint: () => bytesFingerprint(bytes) }
  }
  if (body instanceof URLSearchParams) {
    const bytes = Buffer.from(body.toString(), 'utf8')
    return { bytes, contentType: FORM_CONTENT_TYPE, fingerprint: () => bytesFingerprint(bytes) }
  }
  refuseUnsupported(body)
  const text = renderJson(body)
  // Bound to the bytes sent, parsed back: what the server reads, whatever the data's getters or
  // toJSON would answer the next time.
  return { bytes: Buffer.from(text, 'utf8'), contentType: JSON_CONTENT_TYPE, fingerprint: () => ({ json: JSON.parse(text) as unknown }) }
}

/** `application/json` and every `+json` type (`application/problem+json`…). */
export function isJsonContentType(contentType: string | null | undefined): boolean {
  if (!contentType) return false
  const type = contentType.split(';')[0]?.trim().toLowerCase() ?? ''
  return type === JSON_CONTENT_TYPE || /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+\+json$/.test(type)
}

/**
 * Typed JSON is bound to its canonical parse, unless it has none: text that is not JSON, or JSON
 * whose parse RFC 8785 cannot render (`1e400` parses to Infinity, `"\\ud800"` to a lone
 * surrogate). It is still sent byte for byte, so its bytes are what it is bound to.
 */
function jsonTextFingerprint(text: string, bytes: Uint8Array): FingerprintBody {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
    renderJson(parsed)
  } catch {
    return bytesFingerprint(bytes)
  }
  return { json: parsed }
}

function bytesFingerprint(bytes: Uint8Array): FingerprintBody {
  return { bytesSha256: createHash('sha256').update(bytes).digest('hex') }
}

function refuseUnsupported(body: unknown): void {
  if (body === null || typeof body !== 'object') {
    if (typeof body === 'number' || typeof body === 'boolean' || body === null) return
    throw invalidHidden('body', 'must be a string, bytes, URLSearchParams or JSON data', `a ${typeof body}`)
  }
  if (Array.isArray(body)) return
  const prototype: unknown = Object.getPrototypeOf(body)
  if (prototype === Object.prototype || prototype === null) return
  const name = (body as { constructor?: { name?: unknown } }).constructor?.name
  const kind = typeof name === 'string' && name.length > 0 ? name : 'object with a prototype'
  const why: Record<string, string> = {
    ReadableStream: 'a stream cannot be sent again on a retry; read it into bytes first',
    FormData: 'a multipart body gets a new boundary each time it is rendered; send URLSearchParams, JSON or bytes',
    Blob: "read it first: `new Uint8Array(await blob.arrayBuffer())`",
    File: "read it first: `new Uint8Array(await file.arrayBuffer())`",
  }
  throw invalidHidden(
    'body',
    'must be a string, bytes, URLSearchParams or plain JSON data (an object, an array or a scalar)',
    `a ${kind}${why[kind] ? `: ${why[kind]}` : ': it would be sent as JSON.stringify renders it, often {}'}`,
  )
}
