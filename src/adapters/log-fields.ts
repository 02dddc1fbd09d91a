import { logKey, type LogFields } from '../logger.js'

/**
 * The fields of a guarded request's log lines: `route` (`METHOD /pattern`), and when known the
 * `scope` and the `key` hashed with `logKey`. Never a header: no `Authorization`, no cookie.
 */
export function requestLogFields(request: { method: string; route: string; scope?: string | number | undefined; key?: string | undefined }): LogFields {
  const fields: LogFields = {
    route: `${request.method.toUpperCase()} ${request.route}`,
    ...(request.scope === undefined ? {} : { scope: String(request.scope) }),
  }
  return request.key === undefined ? fields : withHashedKey(fields, request.key)
}

/**
 * `fields` and `key` hashed with `logKey`, made when the request is: a plain data property, never
 * a getter. With a getter of an object literal (a closure per request), V8's young collector kept
 * what the closure reached until the next full collection (issue 21). The hash is about half a
 * microsecond.
 */
export function withHashedKey(fields: Readonly<LogFields>, key: string): LogFields {
  return { ...fields, key: logKey(key) }
}

/** `fields` without `key`, so that a key added after it comes last, as in every log line. */
export function withoutKey(fields: Readonly<LogFields>): LogFields {
  const rest: LogFields = {}
  for (const name of Object.keys(fields)) if (name !== 'key') rest[name] = fields[name]
  return rest
}

/** An error as text for a log line, with the raw key (the engine's messages quote it) replaced by its hash. */
export function describeForLog(error: unknown, key: string | undefined): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error)
  if (key === undefined || key === '') return text
  const quoted = text.replaceAll(JSON.stringify(key), logKey(key))
  // Unquoted too, unless the key is so short that it would mangle ordinary words.
  return key.length >= 8 ? quoted.replaceAll(key, logKey(key)) : quoted
}

/** `{ code }` when the error carries one (an `OncelyError`), else nothing. */
export function codeOf(error: unknown): { code?: string } {
  const code = typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined
  return typeof code === 'string' && code.startsWith('ONCELY_') ? { code } : {}
}
