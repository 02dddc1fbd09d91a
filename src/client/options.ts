import { OncelyError } from '../errors.js'
import type { Attempt } from './attempt.js'
import type { KeyStore } from './key-store.js'
import { memoryKeyStore } from './memory-key-store.js'
import { mintKey } from './mint-key.js'

export interface ClientOptions {
  /** Where request paths are appended, such as `https://api.example.com/v2`. (Default: none, required) */
  readonly baseUrl: string
  /** Where operation keys are kept; must be durable for keys to survive a crash. (Default: `memoryKeyStore()`) */
  readonly keyStore?: KeyStore
  /** Headers sent with every request; `Idempotency-Key` is the client's own and may not be set. (Default: `{}`) */
  readonly headers?: Readonly<Record<string, string>>
  /** Attempts per call, the first included. (Default: `5`) */
  readonly maxAttempts?: number
  /** The backoff's first ceiling; it doubles per retry, full jitter below it. (Default: `100`) */
  readonly baseDelayMs?: number
  /** The backoff's largest ceiling. (Default: `10_000`) */
  readonly maxDelayMs?: number
  /** The longest `Retry-After` (on 429, 503, 409) the client waits; a longer one is cut to this. (Default: `60_000`) */
  readonly maxRetryAfterMs?: number
  /** Time for a whole call, attempts and waits included; `Infinity` for none. (Default: `120_000`) */
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

/** Node's timers hold at most 2^31−1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** Resolves, validates and freezes the options once, at `createClient`; a bad one is named. */
export function resolveClientOptions(options: ClientOptions): ResolvedClientOptions {
  if (typeof options !== 'object' || options === null) invalid('options', 'must be an object', options)
  const resolved: ResolvedClientOptions = {
    baseUrl: resolveBaseUrl(options.baseUrl),
    keyStore: options.keyStore ?? memoryKeyStore(),
    headers: resolveHeaders('headers', options.headers ?? {}),
    maxAttempts: integerAtLeast('maxAttempts', options.maxAttempts ?? 5, 1),
    baseDelayMs: duration('baseDelayMs', options.baseDelayMs ?? 100),
    maxDelayMs: duration('maxDelayMs', options.maxDelayMs ?? 10_000),
    maxRetryAfterMs: duration('maxRetryAfterMs', options.maxRetryAfterMs ?? 60_000),
    deadlineMs: options.deadlineMs === Infinity ? Infinity : positiveDuration('deadlineMs', options.deadlineMs ?? 120_000),
    attemptTimeoutMs: positiveDuration('attemptTimeoutMs', options.attemptTimeoutMs ?? 30_000),
    keyTtlMs: integerAtLeast('keyTtlMs', options.keyTtlMs ?? 86_400_000, 0),
    onRetry: optionalFunction('onRetry', options.onRetry),
    fetch: optionalFunction('fetch', options.fetch) ?? globalThis.fetch,
    mintKey: optionalFunction('mintKey', options.mintKey) ?? (() => mintKey()),
    random: optionalFunction('random', options.random) ?? Math.random,
  }
  const store = resolved.keyStore as Partial<KeyStore> | null
  if (typeof store !== 'object' || store === null || (['claim', 'finish', 'prune'] as const).some((m) => typeof store[m] !== 'function')) {
    invalid('keyStore', 'must have claim, finish and prune methods', options.keyStore)
  }
  return Object.freeze(resolved)
}

/** Validates a call's own headers the same way as the client's. */
export function resolveHeaders(name: string, headers: unknown): Readonly<Record<string, string>> {
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) invalid(name, 'must be an object of header names to strings', headers)
  const result: Record<string, string> = {}
  for (const [header, value] of Object.entries(headers)) {
    if (typeof value !== 'string') invalid(name, `header ${header} must be a string`, value)
    if (header.toLowerCase() === 'idempotency-key') invalid(name, 'may not set Idempotency-Key: the client mints it (pass an operationId)', header)
    result[header] = value
  }
  return Object.freeze(result)
}

function resolveBaseUrl(value: unknown): string {
  if (typeof value !== 'string') invalid('baseUrl', 'must be an http or https URL', value)
  let url: URL
  try {
    url = new URL(value)
  } catch {
    invalid('baseUrl', 'must be an http or https URL', value)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') invalid('baseUrl', 'must be an http or https URL', value)
  if (url.search || url.hash) invalid('baseUrl', 'may not have a query or fragment', value)
  return url.toString().replace(/\/+$/, '')
}

function integerAtLeast(name: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) invalid(name, `must be an integer of at least ${min}`, value)
  return value
}

function duration(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_TIMER_MS) invalid(name, `must be a number of milliseconds from 0 to ${MAX_TIMER_MS}`, value)
  return value
}

function positiveDuration(name: string, value: unknown): number {
  if (duration(name, value) === 0) invalid(name, 'must be more than 0', value)
  return value as number
}

function optionalFunction<F>(name: string, value: F | undefined): F | undefined {
  if (value !== undefined && typeof value !== 'function') invalid(name, 'must be a function', value)
  return value
}

function invalid(name: string, rule: string, value: unknown): never {
  let shown: string
  try {
    shown = typeof value === 'function' ? 'a function' : (JSON.stringify(value) ?? String(value))
  } catch {
    shown = String(value)
  }
  throw new OncelyError('ONCELY_INVALID_OPTION', `oncely client: ${name} ${rule}, got ${shown}`)
}
