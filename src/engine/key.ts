/** The outcome of reading an `Idempotency-Key` header. */
export type ParsedKey = { ok: true; key: string } | { ok: false; reason: string }

export const MAX_KEY_LENGTH = 255

/**
 * Validates an `Idempotency-Key` header value: 1 to 255 printable ASCII characters. Also accepts
 * the IETF draft's form, a structured-field string (`"abc"`, with `\"` and `\\` escapes), and
 * reads it as the key inside the quotes, so `"abc"` and `abc` name the same operation. A value
 * that starts or ends with `"` must be one whole quoted string: `"abc`, `abc"` and `"abc";p=1` are
 * refused. An unquoted value with a comma is refused: Node joins repeated headers with `, ` before
 * anyone sees them, so `a, b` is two keys sent at once (a quoted key may hold a comma).
 *
 * @example
 * ```ts
 * import { parseIdempotencyKey } from 'oncely'
 * console.assert(parseIdempotencyKey('"8e03978e"').ok)
 * console.assert(!parseIdempotencyKey('').ok && !parseIdempotencyKey('"8e03978e').ok)
 * console.assert(!parseIdempotencyKey('a, b').ok && parseIdempotencyKey('"a, b"').ok)
 * ```
 */
export function parseIdempotencyKey(header: string | readonly string[] | undefined | null): ParsedKey {
  if (header === undefined || header === null) return { ok: false, reason: 'the Idempotency-Key header is missing' }
  if (typeof header !== 'string') {
    return header.length === 1 ? parseIdempotencyKey(header[0]) : { ok: false, reason: 'the Idempotency-Key header must be sent once' }
  }
  const raw = header.trim()
  const quoted = raw.length >= 2 && raw.startsWith('"') && raw.endsWith('"')
  // A quote at one end only is a quoted key cut short (or with RFC 8941 parameters after it),
  // never a bare key: read as one, `"abc` and `"abc"` would name two operations.
  const key = quoted ? unquote(raw) : raw.startsWith('"') || raw.endsWith('"') ? undefined : raw
  if (key === undefined) return { ok: false, reason: 'the Idempotency-Key is a malformed quoted string, or was sent more than once' }
  if (!quoted && key.includes(',')) return { ok: false, reason: 'the Idempotency-Key must be sent once; an unquoted key may not contain a comma' }
  if (key.length === 0) return { ok: false, reason: 'the Idempotency-Key is empty' }
  if (key.length > MAX_KEY_LENGTH) return { ok: false, reason: `the Idempotency-Key is longer than ${MAX_KEY_LENGTH} characters` }
  if (!/^[\x20-\x7e]+$/.test(key)) return { ok: false, reason: 'the Idempotency-Key must be printable ASCII' }
  return { ok: true, key }
}

/** Reads an RFC 8941 sf-string: `"` … `"` with `\"` and `\\` as the only escapes. */
function unquote(quoted: string): string | undefined {
  let out = ''
  for (let i = 1; i < quoted.length - 1; i++) {
    const char = quoted[i]
    if (char === '\\') {
      const next = quoted[++i]
      if ((next !== '"' && next !== '\\') || i >= quoted.length - 1) return undefined
      out += next
    } else if (char === '"') {
      return undefined
    } else {
      out += char
    }
  }
  return out
}
