import type { HttpAnswer } from './answers.js'

/**
 * The response header that says how long a key is remembered, in seconds. Not in the IETF draft
 * (-07 or -09): the working group's issue #35 asks for such a header, and this is the name that
 * pairs with the request's `Idempotency-Key` (docs/adapters.md, Key TTL).
 */
export const KEY_TTL_HEADER = 'idempotency-key-ttl'

/** The header pair to add to an answer of a guarded route, or none when it is not advertised. */
export function keyTtlHeaders(keyTtlSeconds: number | undefined): Array<readonly [string, string]> {
  return keyTtlSeconds === undefined ? [] : [[KEY_TTL_HEADER, String(keyTtlSeconds)]]
}

/** `answer` with the key TTL header, replacing one already there (a stored response never has one). */
export function withKeyTtl(answer: HttpAnswer, keyTtlSeconds: number | undefined): HttpAnswer {
  if (keyTtlSeconds === undefined) return answer
  const headers = [...answer.headers.filter(([name]) => name !== KEY_TTL_HEADER), ...keyTtlHeaders(keyTtlSeconds)]
  return { ...answer, headers }
}
