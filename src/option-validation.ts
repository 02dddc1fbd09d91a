import { OncelyError } from './errors.js'

/**
 * The checks every part of oncely runs on its options when they are resolved, once, at start-up:
 * a bad option fails there with `ONCELY_INVALID_OPTION` and a message that names it
 * (`option maxStoredBodyBytes must be a positive integer; got -1`).
 */
export function invalid(name: string, rule: string, value: unknown): OncelyError {
  return new OncelyError('ONCELY_INVALID_OPTION', `option ${name} ${rule}; got ${describeValue(value)}`)
}

/**
 * For a value that must never appear in a message (a header value, a URL that may hold
 * credentials): the message keeps its shape and says what was given instead of showing it.
 */
export function invalidHidden(name: string, rule: string, description: string, options?: { cause?: unknown }): OncelyError {
  return new OncelyError('ONCELY_INVALID_OPTION', `option ${name} ${rule}; got ${description}`, options)
}

/**
 * What a value is, for one that may hold a secret (a connection string, a pool's or a client's
 * configuration): its kind, never its content.
 */
export function describeKind(value: unknown): string {
  if (value === null || value === undefined) return String(value)
  if (typeof value === 'function') return 'a function'
  if (Array.isArray(value)) return 'an array (not shown)'
  return typeof value === 'object' ? 'an object (not shown)' : `a ${typeof value} (not shown)`
}

export function positiveInteger(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) throw invalid(name, 'must be a positive integer', value)
  return value
}

export function integerAtLeast(name: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) throw invalid(name, `must be an integer of at least ${min}`, value)
  return value
}

export function optionalFunction<F>(name: string, value: F | undefined): F | undefined {
  if (value !== undefined && typeof value !== 'function') throw invalid(name, 'must be a function', value)
  return value
}

export function optionalBoolean(name: string, value: unknown): boolean | undefined {
  if (value !== undefined && typeof value !== 'boolean') throw invalid(name, 'must be true or false', value)
  return value
}

export function stringList(name: string, value: unknown): string[] {
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string' && item.length > 0)) {
    throw invalid(name, 'must be an array of non-empty strings', value)
  }
  return [...(value as string[])]
}

/** A value as an error message shows it: JSON where it can be, never a function's source. */
export function describeValue(value: unknown): string {
  if (typeof value === 'function') return 'a function'
  // JSON would show NaN and Infinity as null, and cannot show a bigint.
  if (typeof value === 'number' || typeof value === 'bigint') return String(value)
  try {
    return JSON.stringify(value, (_key, member: unknown) => (typeof member === 'function' ? '[function]' : typeof member === 'bigint' ? String(member) : member)) ?? String(value)
  } catch {
    return String(value)
  }
}
