/**
 * A request body: a string or bytes are sent as they are; anything else is sent as JSON
 * (`content-type: application/json` unless the call sets its own).
 */
export type RequestBody = string | Uint8Array | JsonValue

export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue | undefined }

/** The bytes and default content type of a body, rendered once and sent on every attempt. */
export function encodeBody(body: RequestBody | undefined): { bytes: Uint8Array | undefined; contentType: string | undefined } {
  if (body === undefined) return { bytes: undefined, contentType: undefined }
  if (typeof body === 'string') return { bytes: Buffer.from(body), contentType: 'text/plain; charset=utf-8' }
  if (body instanceof Uint8Array) return { bytes: body, contentType: 'application/octet-stream' }
  return { bytes: Buffer.from(JSON.stringify(body)), contentType: 'application/json' }
}
