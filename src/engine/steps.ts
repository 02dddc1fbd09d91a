import { hash } from 'node:crypto'

/**
 * The key a step passes to the outside world (Invariant 2): derived from the scope (all users
 * share one provider account), the key, the claim's identity (a key reused after expiry is a
 * new operation at the provider too, while a take-over of the same claim reuses it) and the
 * step. 64 hex characters, within every provider's limit.
 *
 * @example
 * ```ts
 * import { deriveStepKey } from 'oncely'
 * const providerKey = deriveStepKey({ scope: '42', key: 'order-42', claimId: '0b6c…', step: 'charge' })
 * ```
 */
export function deriveStepKey(parts: { scope: string; key: string; claimId: string; step: string }): string {
  // Length-prefixed fields, so no choice of values can make two different tuples collide. One
  // text hashed at once (crypto.hash): the same bytes as updating a Hash field by field, without
  // the Hash object, a quarter of the CPU per call (issue 21).
  let text = ''
  for (const field of [parts.scope, parts.key, parts.claimId, parts.step]) text += `${Buffer.byteLength(field)}:${field};`
  return hash('sha256', text, 'hex')
}

/** Round-trips a step result through JSON, so a first run and a resumed run see the same value. */
export function toStoredForm(result: unknown): { ok: true; value: unknown; json: string } | { ok: false } {
  try {
    const json = JSON.stringify(result === undefined ? null : result)
    if (json === undefined) return { ok: false }
    return { ok: true, value: JSON.parse(json) as unknown, json }
  } catch {
    return { ok: false }
  }
}

/** The key of the wrapper a step result is stored in when jsonb could not hold it as it is. */
const WRAPPED = 'oncely:json'

/**
 * Issue 8, path 10: jsonb refuses U+0000 in a string, so a result whose JSON holds one is stored
 * as its JSON text inside a wrapper (`{"oncely:json": "…"}`, the NUL kept as the six characters
 * of its escape). A result that looks like the wrapper is wrapped too, so decoding is exact.
 * Every other result is stored as it is, readable by operators.
 */
export function encodeStepResult(value: unknown, json: string): unknown {
  return json.includes('\\u0000') || looksWrapped(value) ? { [WRAPPED]: json } : value
}

/** The inverse of `encodeStepResult`, for results read back from the row. */
export function decodeStepResult(stored: unknown): unknown {
  return looksWrapped(stored) ? (JSON.parse((stored as Record<string, string>)[WRAPPED] ?? 'null') as unknown) : stored
}

function looksWrapped(value: unknown): boolean {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false
  const keys = Object.keys(value)
  return keys.length === 1 && keys[0] === WRAPPED && typeof (value as Record<string, unknown>)[WRAPPED] === 'string'
}
