/**
 * RFC 8785 canonical JSON of the values a parsed JSON body holds, written in one pass: what
 * `canonicalize` writes for them, byte for byte, at about half its CPU (issue 21: 10.7 against
 * 20.7–22.7 µs for a 1.7 KB body, measured alone; the peers' bench never shows it, its bodies are
 * 55 bytes). Anything else answers `undefined`, and the caller hands the whole value to
 * `canonicalize`, which stays the rule: a string with any surrogate (a lone one it refuses), a
 * number that is not finite, a function, symbol or bigint where a value belongs, an object with
 * `toJSON`, an array with holes, and nesting deeper than `MAX_DEPTH` (a cycle, which it reports).
 * test/engine/canonical-json.test.ts compares the two on generated values.
 */
export function canonicalJson(value: unknown): string | undefined {
  return write(value, 0)
}

/** Deeper than this goes to `canonicalize`: it finds cycles; this does not track what it has seen. */
const MAX_DEPTH = 256

/** What JSON.stringify escapes in a string (the quote, the backslash, controls) or canonicalize checks (surrogates). */
// eslint-disable-next-line no-control-regex -- the controls are what JSON.stringify escapes
const NOT_PLAIN = /["\\\u0000-\u001f\ud800-\udfff]/
const SURROGATE = /[\ud800-\udfff]/

function write(value: unknown, depth: number): string | undefined {
  switch (typeof value) {
    case 'string':
      return writeString(value)
    case 'number':
      // JSON.stringify writes a finite number as ECMAScript's Number::toString, as RFC 8785 asks.
      return Number.isFinite(value) ? JSON.stringify(value) : undefined
    case 'boolean':
      return value ? 'true' : 'false'
    case 'object':
      if (value === null) return 'null'
      if (depth >= MAX_DEPTH || typeof (value as { toJSON?: unknown }).toJSON === 'function') return undefined
      return Array.isArray(value) ? writeArray(value, depth) : writeObject(value as Record<string, unknown>, depth)
    default:
      return undefined
  }
}

function writeString(text: string): string | undefined {
  if (!NOT_PLAIN.test(text)) return `"${text}"`
  return SURROGATE.test(text) ? undefined : JSON.stringify(text)
}

function writeArray(items: readonly unknown[], depth: number): string | undefined {
  let text = '['
  for (let index = 0; index < items.length; index++) {
    // A hole is written by canonicalize as nothing between two commas: not JSON, left to it.
    if (!(index in items)) return undefined
    const item = items[index]
    // As canonicalize: an undefined or symbol item is null.
    const part = item === undefined || typeof item === 'symbol' ? 'null' : write(item, depth + 1)
    if (part === undefined) return undefined
    text += index === 0 ? part : `,${part}`
  }
  return `${text}]`
}

function writeObject(record: Record<string, unknown>, depth: number): string | undefined {
  // Keys in UTF-16 code unit order, JavaScript's default sort: RFC 8785's order.
  const keys = Object.keys(record).sort()
  let text = '{'
  for (const key of keys) {
    const item = record[key]
    // As canonicalize: an undefined or symbol member is left out.
    if (item === undefined || typeof item === 'symbol') continue
    const name = writeString(key)
    if (name === undefined) return undefined
    const part = write(item, depth + 1)
    if (part === undefined) return undefined
    text += text.length === 1 ? `${name}:${part}` : `,${name}:${part}`
  }
  return `${text}}`
}
