import { integerAtLeast, invalid, invalidHidden, optionalFunction } from '../option-validation.js'
import type { Attempt } from './attempt.js'
import type { KeyStore } from './key-store.js'
import { processKeyStore } from './memory-key-store.js'
import { mintKey } from './mint-key.js'
import { redactUrl } from './redact-url.js'

export interface ClientOptions {
  /** Where request paths are appended, such as `https://api.example.com/v2`. (Default: none, required) */
  readonly baseUrl: string
  /**
   * Where operation keys are kept; must be durable for keys to survive a crash. The default is
   * one memory store shared by every client of the process. (Default: `processKeyStore()`)
   */
  readonly keyStore?: KeyStore
  /** Headers sent with every request; `Idempotency-Key` is the client's own and may not be set. (Default: `{}`) */
  readonly headers?: Readonly<Record<string, string>>
  /**
   * Attempts per call, the first included; `Infinity` for no count, so that only `deadlineMs`
   * bounds the call. (Default: `Infinity`)
   */
  readonly maxAttempts?: number
  /** The backoff's first ceiling; it doubles per retry, full jitter below it. (Default: `100`) */
  readonly baseDelayMs?: number
  /** The backoff's largest ceiling. (Default: `10_000`) */
  readonly maxDelayMs?: number
  /** The longest `Retry-After` (on 429, 503, 409) the client waits; a longer one is cut to this. (Default: `60_000`) */
  readonly maxRetryAfterMs?: number
  /**
   * Time for a whole call, the key store, attempts and waits included; `Infinity` for none. The
   * default outlasts a crash recovery on a server with oncely's defaults: a claim whose owner
   * died is taken over once it is 90 s stale, up to one 30 s renewal after the owner's last
   * sign of life, and the retry then does the work. (Default: `150_000`)
   */
  readonly deadlineMs?: number
  /** Time for one attempt, until its whole response body has arrived. (Default: `30_000`) */
  readonly attemptTimeoutMs?: number
  /** How long a finished operation's key is kept before `keyStore.prune()` may delete it. (Default: `86_400_000`, a day) */
  readonly keyTtlMs?: number
  /** Called before each wait for a retry, with the attempt that failed; for logs and metrics. (Default: none) */
  readonly onRetry?: (event: RetryEvent) => void
  /** The fetch to use, such as one bound to an undici dispatcher. (Default: `globalThis.fetch`) */
  readonly fetch?: typeof globalThis.fetch
  /** Mints a new key. (Default: `mintKey`, a UUIDv7) */
  readonly mintKey?: () => string
  /** Source of jitter in [0, 1). (Default: `Math.random`) */
  readonly random?: () => number
}

/** What `onRetry` receives: the attempt that failed and the wait before the next one. */
export interface RetryEvent {
  readonly method: string
  readonly url: string
  readonly operationId: string | undefined
  readonly attempt: Attempt
  /** The wait before attempt `attempt.number + 1`, after `Retry-After` or backoff. */
  readonly delayMs: number
}

export type ResolvedClientOptions = Readonly<Required<Omit<ClientOptions, 'onRetry' | 'headers'>>> & {
  readonly headers: Readonly<Record<string, string>>
  readonly onRetry: ((event: RetryEvent) => void) | undefined
}

/**
 * Outlasts a crash recovery under the server's defaults: the stale threshold (90 s) plus one
 * lease renewal (30 s), and 30 s more for the retry that takes the claim over to finish.
 */
export const DEFAULT_DEADLINE_MS = 150_000

/** Node's timers hold at most 2^31−1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** Resolves, validates and freezes the options once, at `createClient`; a bad one is named. */
export function resolveClientOptions(options: ClientOptions): ResolvedClientOptions {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const resolved: ResolvedClientOptions = {
    baseUrl: resolveBaseUrl(options.baseUrl),
    keyStore: options.keyStore ?? processKeyStore(),
    headers: resolveHeaders('headers', options.headers ?? {}),
    maxAttempts: (options.maxAttempts ?? Infinity) === Infinity ? Infinity : integerAtLeast('maxAttempts', options.maxAttempts, 1),
    baseDelayMs: duration('baseDelayMs', options.baseDelayMs ?? 100),
    maxDelayMs: duration('maxDelayMs', options.maxDelayMs ?? 10_000),
    maxRetryAfterMs: duration('maxRetryAfterMs', options.maxRetryAfterMs ?? 60_000),
    deadlineMs: options.deadlineMs === Infinity ? Infinity : positiveDuration('deadlineMs', options.deadlineMs ?? DEFAULT_DEADLINE_MS),
    attemptTimeoutMs: positiveDuration('attemptTimeoutMs', options.attemptTimeoutMs ?? 30_000),
    keyTtlMs: integerAtLeast('keyTtlMs', options.keyTtlMs ?? 86_400_000, 0),
    onRetry: optionalFunction('onRetry', options.onRetry),
    fetch: optionalFunction('fetch', options.fetch) ?? globalThis.fetch,
    mintKey: optionalFunction('mintKey', options.mintKey) ?? (() => mintKey()),
    random: optionalFunction('random', options.random) ?? Math.random,
  }
  const store = resolved.keyStore as Partial<KeyStore> | null
  if (typeof store !== 'object' || store === null || (['claim', 'finish', 'prune'] as const).some((m) => typeof store[m] !== 'function')) {
    throw invalid('keyStore', 'must have claim, finish and prune methods', options.keyStore)
  }
  return Object.freeze(resolved)
}

/** Validates a call's own headers the same way as the client's. */
export function resolveHeaders(name: string, headers: unknown): Readonly<Record<string, string>> {
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) throw invalid(name, 'must be an object of header names to strings', headers)
  const result: Record<string, string> = {}
  for (const [header, value] of Object.entries(headers)) {
    // Header values are never shown in a message: they hold tokens and API keys.
    if (!HEADER_NAME.test(header)) throw invalid(name, 'must have header names that are HTTP tokens (letters, digits and !#$%&\'*+-.^_`|~)', header)
    if (typeof value !== 'string') throw invalidHidden(name, `must map header ${header} to a string`, value === null ? 'null' : `a ${typeof value} (not shown)`)
    if (!HEADER_VALUE.test(value)) throw invalidHidden(name, `must map header ${header} to a value without a line break, a NUL or a character above U+00FF`, 'a value that has one (not shown)')
    if (header.toLowerCase() === 'idempotency-key') throw invalid(name, 'may not set Idempotency-Key: the client mints it (pass an operationId)', header)
    result[header] = value
  }
  return Object.freeze(result)
}

function resolveBaseUrl(value: unknown): string {
  if (typeof value !== 'string') throw invalid('baseUrl', 'must be an http or https URL', value)
  let url: URL
  try {
    url = new URL(value)
  } catch {
    // Not shown: a string that is no URL may still hold a password.
    throw invalidHidden('baseUrl', 'must be an http or https URL', 'a string that is not a URL (not shown)')
  }
  const shown = redactUrl(url)
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('baseUrl', 'must be an http or https URL', shown)
  if (url.username || url.password) throw invalid('baseUrl', 'may not hold credentials (user:password@); send them in an authorization header', shown)
  if (url.search || url.hash) throw invalid('baseUrl', 'may not have a query or fragment', shown)
  return url.toString().replace(/\/+$/, '')
}

function duration(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_TIMER_MS) throw invalid(name, `must be a number of milliseconds from 0 to ${MAX_TIMER_MS}`, value)
  return value
}

function positiveDuration(name: string, value: unknown): number {
  if (duration(name, value) === 0) throw invalid(name, 'must be more than 0', value)
  return value as number
}

/** RFC 9110 §5.1 token. */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** What fetch's `Headers` accepts as a value: bytes, no NUL, CR or LF. */
const HEADER_VALUE = /^[^\0\r\n\u0100-\uffff]*$/
