import { invalid } from '../engine/options.js'

/** A parsed JSON Pointer (RFC 6901): the reference tokens, unescaped. */
export type Pointer = readonly string[]

/** Parses the `excludeBodyFields` option at start-up; a pointer that is not `/a/b` form is named. */
export function parsePointers(name: string, value: unknown): readonly Pointer[] {
  if (!Array.isArray(value)) throw invalid(name, 'must be an array of JSON Pointers such as "/client_timestamp"', value)
  return Object.freeze(
    value.map((pointer: unknown) => {
      if (typeof pointer !== 'string' || !pointer.startsWith('/') || /~[^01]|~$/.test(pointer)) {
        throw invalid(name, 'must hold JSON Pointers (RFC 6901) such as "/client_timestamp" or "/meta/nonce"', pointer)
      }
      return Object.freeze(pointer.slice(1).split('/').map((token) => token.replaceAll('~1', '/').replaceAll('~0', '~')))
    }),
  )
}

/**
 * A copy of a parsed JSON body without the fields the pointers name; the body itself is left as
 * the handler will see it. Pointers that name nothing are ignored, and raw bytes are not JSON.
 */
export function withoutFields(body: unknown, pointers: readonly Pointer[]): unknown {
  if (pointers.length === 0 || typeof body !== 'object' || body === null || body instanceof Uint8Array) return body
  const copy = structuredClone(body) as unknown
  for (const pointer of pointers) remove(copy, pointer)
  return copy
}

function remove(root: unknown, pointer: Pointer): void {
  let node = root
  for (const [index, token] of pointer.entries()) {
    if (typeof node !== 'object' || node === null) return
    const last = index === pointer.length - 1
    if (Array.isArray(node)) {
      if (!/^(0|[1-9]\d*)$/.test(token) || Number(token) >= node.length) return
      if (last) return void node.splice(Number(token), 1)
      node = node[Number(token)]
    } else {
      if (!Object.hasOwn(node, token)) return
      if (last) return void delete (node as Record<string, unknown>)[token]
      node = (node as Record<string, unknown>)[token]
    }
  }
}
