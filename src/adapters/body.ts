import type { IncomingHttpHeaders } from 'node:http'

/** `application/json` and every `application/*+json` (problem+json, vnd.api+json …). */
export function isJsonContentType(contentType: string | null | undefined): boolean {
  return /^application\/([\w.+-]*\+)?json\s*(;|$)/i.test(contentType ?? '')
}

/** A body chunk as bytes: nothing is empty, a string is encoded (UTF-8 unless told). */
export function toBytes(chunk: unknown, encoding?: BufferEncoding): Uint8Array {
  if (chunk === undefined || chunk === null) return new Uint8Array(0)
  if (typeof chunk === 'string') return Buffer.from(chunk, encoding ?? 'utf8')
  if (chunk instanceof Uint8Array) return chunk
  throw new TypeError('a response body must be a string, a Buffer or a Uint8Array')
}

/** Whether a request carries a body, by its headers (as body parsers decide it): chunked, or a length above 0. */
export function requestHasBody(headers: IncomingHttpHeaders): boolean {
  const length = headers['content-length']
  return headers['transfer-encoding'] !== undefined || (length !== undefined && Number(length) > 0)
}
