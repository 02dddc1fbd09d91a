import { hash } from 'node:crypto'
import { invalid } from './option-validation.js'

/** A pino-style logger: pino, bunyan-compatible and most structured loggers have this shape. */
export interface StructuredLogger {
  info(fields: Record<string, unknown>, message: string): void
  warn(fields: Record<string, unknown>, message: string): void
  error(fields: Record<string, unknown>, message: string): void
}

/**
 * What a `log` option accepts: a pino-style logger (fields as an object, then the message), or a
 * function given one plain line.
 */
export type LogOption = StructuredLogger | ((line: string) => void)

/** The fields oncely puts on its log lines; never a secret, never a full key. */
export interface LogFields {
  scope?: string
  /** Always passed through `logKey`: hashed, so a key that is itself a secret never leaks. */
  key?: string
  route?: string
  code?: string
  [field: string]: unknown
}

export interface Logger {
  info(fields: LogFields, message: string): void
  warn(fields: LogFields, message: string): void
  error(fields: LogFields, message: string): void
}

/**
 * Resolves a `log` option once: a structured logger is used as it is; a line function gets
 * `message key=value …`; undefined writes lines to `console.warn`.
 *
 * @example
 * ```ts
 * import { resolveLogger } from 'oncely'
 * const log = resolveLogger((line) => process.stderr.write(`${line}\n`))
 * log.warn({ route: 'POST /v1/charges', code: 'ONCELY_LOCK_LOST' }, 'claim taken over')
 * ```
 */
export function resolveLogger(option: LogOption | undefined, name = 'log'): Logger {
  if (option === undefined) return lineLogger((line) => console.warn(line))
  if (typeof option === 'function') return lineLogger(option)
  if (typeof option === 'object' && option !== null && ['info', 'warn', 'error'].every((level) => typeof (option as unknown as Record<string, unknown>)[level] === 'function')) {
    return {
      info: (fields, message) => option.info(fields, message),
      warn: (fields, message) => option.warn(fields, message),
      error: (fields, message) => option.error(fields, message),
    }
  }
  throw invalid(name, 'must be a function taking a line, or a logger with info/warn/error(fields, message) such as pino', option)
}

function lineLogger(write: (line: string) => void): Logger {
  const line = (level: string) => (fields: LogFields, message: string) => write(`${level === 'info' ? '' : `${level}: `}${message}${formatFields(fields)}`)
  return { info: line('info'), warn: line('warn'), error: line('error') }
}

function formatFields(fields: LogFields): string {
  const parts: string[] = []
  for (const [name, value] of Object.entries(fields)) {
    if (value === undefined) continue
    const text = typeof value === 'string' ? value : JSON.stringify(value)
    parts.push(`${name}=${/^[\w./:@-]+$/.test(text) ? text : JSON.stringify(text)}`)
  }
  return parts.length === 0 ? '' : ` ${parts.join(' ')}`
}

/**
 * How a key appears in logs: the first 16 hex characters of its SHA-256. Enough to find the key
 * with `oncely keys list` (which prints the same form) without writing a key that may itself be
 * a secret (some clients use a token or an order reference as the key).
 *
 * @example
 * ```ts
 * import { logKey } from 'oncely'
 * console.assert(logKey('order-42').length === 16)
 * ```
 */
export function logKey(key: string): string {
  return hash('sha256', key, 'hex').slice(0, 16)
}
