import { invalidHidden } from '../option-validation.js'

/**
 * Renders JSON data as `JSON.stringify` does, but refuses what it would not send as it is: NaN
 * and ±Infinity (sent as `null`), a function or a symbol (a member dropped, `null` in an array),
 * `undefined` or a hole in an array (`null`), a bigint (JSON.stringify throws), a lone surrogate
 * in a string or a member name (not portable JSON; RFC 8785 refuses it), an object that is not
 * plain (a `Map` is sent as `{}`) and a cycle. An `undefined` member is left out, as an optional
 * field means, and `toJSON` is honoured (a `Date` is sent as its ISO string), its result checked
 * by the same rule.
 *
 * Refused with `ONCELY_INVALID_OPTION` naming the kind of value, never a value or a member name:
 * a body may hold a card number, and a member name may be an e-mail address.
 */
export function renderJson(body: unknown): string {
  let text: string | undefined
  try {
    text = JSON.stringify(body, refuseUnfaithful)
  } catch (error) {
    const got = error instanceof UnfaithfulValue ? error.message : isCycle(error) ? 'data holding a cycle (an object that contains itself)' : 'data JSON.stringify refuses'
    throw invalidHidden('body', 'must be JSON data that JSON.stringify sends as it is', got, { cause: error instanceof UnfaithfulValue ? undefined : error })
  }
  if (text === undefined) throw invalidHidden('body', 'must be JSON data that JSON.stringify sends as it is', 'data JSON.stringify renders as nothing')
  return text
}

class UnfaithfulValue extends Error {}

/** With the u flag a paired surrogate is one code point, so only a lone one matches. */
const LONE_SURROGATE = /\p{Surrogate}/u

/** The replacer: called for every value, after its `toJSON`, with its holder as `this`. */
function refuseUnfaithful(this: unknown, key: string, value: unknown): unknown {
  const inArray = Array.isArray(this)
  if (!inArray && hasLoneSurrogate(key)) throw new UnfaithfulValue('data holding a member name with a lone surrogate (not portable JSON)')
  switch (typeof value) {
    case 'number':
      if (!Number.isFinite(value)) throw new UnfaithfulValue(`data holding ${String(value)} (JSON.stringify would send null)`)
      return value
    case 'string':
      if (hasLoneSurrogate(value)) throw new UnfaithfulValue('data holding a string with a lone surrogate (not portable JSON)')
      return value
    case 'function':
      throw new UnfaithfulValue(`data holding a function (JSON.stringify would ${inArray ? 'send null' : 'drop the member'})`)
    case 'symbol':
      throw new UnfaithfulValue(`data holding a symbol (JSON.stringify would ${inArray ? 'send null' : 'drop the member'})`)
    case 'bigint':
      throw new UnfaithfulValue('data holding a bigint (JSON has no such number: send it as a string, or type the JSON text as a string body)')
    case 'boolean':
      return value
    case 'undefined':
      if (inArray) throw new UnfaithfulValue('data holding undefined in an array, or a hole (JSON.stringify would send null)')
      return value
    default:
      if (value !== null && !Array.isArray(value)) refuseNotPlain(value as object)
      return value
  }
}

function refuseNotPlain(value: object): void {
  const prototype: unknown = Object.getPrototypeOf(value)
  if (prototype === Object.prototype || prototype === null) return
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name
  const kind = typeof name === 'string' && name.length > 0 ? name : 'object with a prototype'
  throw new UnfaithfulValue(`data holding a ${kind} (JSON.stringify would send its own fields, often {}; give it a toJSON or pass plain data)`)
}

function isCycle(error: unknown): boolean {
  return error instanceof TypeError && /circular/i.test(error.message)
}

/** A UTF-16 surrogate without its pair: JSON.stringify escapes it, RFC 8785 refuses it. */
export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text)
}

