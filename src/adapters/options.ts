import type { Engine } from '../engine/engine.js'
import type { StoredResponse } from '../engine/types.js'
import { invalid, optionalBoolean, optionalFunction, positiveInteger, stringList } from '../option-validation.js'
import { resolveLogger, type Logger, type LogOption } from '../logger.js'
import { parsePointers, type Pointer } from './excluded-fields.js'

/** What one guarded request came to, reported to `onOutcome` (for metrics). */
export interface OutcomeEvent {
  /**
   * `created`: the handler answered below 400; `replayed`: a stored response was sent again;
   * `conflict`: 409 (the key is in use, or this worker lost its claim); `mismatch`: 422;
   * `invalid`: 400 or 401 before any claim; `failed`: the handler answered 400 or more, threw,
   * or its outcome could not be stored; `unkeyed`: no key was sent and `required` is `false`, so
   * the request ran unguarded.
   */
  outcome: 'created' | 'replayed' | 'conflict' | 'mismatch' | 'invalid' | 'failed' | 'unkeyed'
  /** Time from the start of the guard to the answer, handler included, in milliseconds. */
  durationMs: number
  /** The status sent to the client. */
  status: number
  /** The problem's `instance` (`urn:uuid:…`) when oncely answered with a problem; absent otherwise. */
  instance?: string
  /**
   * The request's scope, raw key and fingerprint, on every outcome the engine decided (`created`,
   * `replayed`, `conflict`, `mismatch`, `failed` after the claim): `createMetrics`'s `onOutcome`
   * feeds its repeated-payload detector with them, so nothing hashes the body a second time. The
   * key is as sent: hash it (`logKey`) before it is logged. (Default: absent before the decision)
   */
  scope?: string
  key?: string
  fingerprint?: string
}

/** Gives the user (scope) a request acts for, a string or a number (`42` and `'42'` are one scope); `undefined` answers 401. */
export type ScopeResolver<Req> = (request: Req) => string | number | undefined | Promise<string | number | undefined>

/** Options every adapter takes. `Req` is the framework's request type. */
export interface AdapterOptions<Req, Tx = unknown> {
  /** The engine: `createEngine({ store })`. (Default: none, required) */
  engine: Engine<Tx>
  /**
   * Whose key a request uses: the authenticated user or account id. Keys are stored per scope, so
   * one user can never replay another's response. Pass `'global'` explicitly to share one scope
   * among every caller (a single-tenant service). (Default: none, required)
   */
  scope: ScopeResolver<Req> | 'global'
  /** Methods that need an `Idempotency-Key`. (Default: `['POST', 'PATCH']`) */
  methods?: readonly string[]
  /**
   * Which routes need a key, given the method and the route pattern (the request path where the
   * framework has not matched a route yet). (Default: every route with a guarded method)
   */
  routes?: (method: string, path: string) => boolean
  /** Query parameters that change the meaning of a request and enter its fingerprint. (Default: `[]`) */
  query?: readonly string[]
  /**
   * The largest response body stored. A larger one is sent to the first caller and its outcome
   * recorded without it: a retry with the key gets 500 `…/result-unavailable` (`result_status`
   * the status first sent) and never runs the operation again. (Default: 1048576)
   */
  maxStoredBodyBytes?: number
  /**
   * Called with a response before it is stored; what it returns is stored and replayed to
   * retries, while the first caller gets the response as the handler sent it. For data a replay
   * must not carry (a card number, a one-time secret). It must keep the status. A hook that
   * throws (or returns no response, or another status) is handled like a body over
   * `maxStoredBodyBytes`: the first caller still gets its answer, the outcome is recorded with a
   * 500 `…/result-unavailable` problem in its place, and nothing runs twice. (Default: none,
   * stored as sent)
   */
  redact?: (response: StoredResponse) => StoredResponse | Promise<StoredResponse>
  /**
   * `false` lets a request without an `Idempotency-Key` run unguarded (reported to `onOutcome` as
   * `unkeyed`), to switch oncely on before every client sends keys. A request with a key is
   * always guarded. (Default: `true`: a guarded request without a key gets 400)
   */
  required?: boolean
  /**
   * JSON Pointers (RFC 6901) of body fields left out of the fingerprint, such as a client
   * timestamp or nonce that changes on every retry. Two requests that differ only there are the
   * same request: the second gets the first one's response. (Default: `[]`)
   */
  excludeBodyFields?: readonly string[]
  /**
   * How long, in milliseconds, a duplicate whose key is still being processed waits for the first
   * request to finish instead of getting 409 at once: it then gets the first one's response
   * (replayed), or runs if the first let the key go. Past the bound it gets 409 with a
   * `Retry-After` judged on the claim as last read. No database connection is held while it
   * waits: the row is read with capped, jittered backoff (10 ms doubling to 200 ms). A function
   * gives a value per route, from the method and the route pattern. A client that closes its
   * connection stops the wait. (Default: `0`, 409 at once)
   */
  waitMs?: number | ((method: string, route: string) => number)
  /** Also send `X-Idempotent-Replayed: true` on a replay, for clients written for other servers. (Default: `false`) */
  xIdempotentReplayed?: boolean
  /**
   * Advertise how long a key is remembered, the engine's `ttlMs` in whole seconds: an
   * `Idempotency-Key-TTL` header on every answer of a guarded route (first answers, replays,
   * problems) and `key_ttl_seconds` in every problem body. `false` sends neither.
   * (Default: `true`)
   */
  keyTtlHeader?: boolean
  /**
   * Where the adapter logs what it cannot do (store a response, reach the database…): a
   * pino-style logger (`info/warn/error(fields, message)`), given `scope`, `key` (hashed with
   * `logKey`: 16 hex characters, never the key itself), `route` (`METHOD /pattern`), `code` and
   * the problem's `instance` as fields; or a function given one plain line, `message
   * field=value …`. No request header (`Authorization`, cookies) is ever logged.
   * (Default: lines to `console.warn`)
   */
  log?: LogOption
  /** Called once per guarded request with its outcome, for metrics. (Default: none) */
  onOutcome?: (event: OutcomeEvent) => void
}

export interface ResolvedAdapterOptions<Req, Tx = unknown> {
  readonly engine: Engine<Tx>
  readonly scope: (request: Req) => Promise<string | number | undefined>
  readonly methods: ReadonlySet<string>
  readonly routes: ((method: string, path: string) => boolean) | undefined
  readonly query: readonly string[]
  readonly maxStoredBodyBytes: number
  readonly redact: ((response: StoredResponse) => StoredResponse | Promise<StoredResponse>) | undefined
  readonly required: boolean
  readonly excludeBodyFields: readonly Pointer[]
  readonly xIdempotentReplayed: boolean
  readonly waitMs: (method: string, route: string) => number
  /** The key TTL advertised, in whole seconds; `undefined` when `keyTtlHeader` is `false`. */
  readonly keyTtlSeconds: number | undefined
  readonly log: Logger
  readonly onOutcome: ((event: OutcomeEvent) => void) | undefined
}

export const DEFAULT_GUARDED_METHODS: readonly string[] = Object.freeze(['POST', 'PATCH'])
export const DEFAULT_MAX_STORED_BODY_BYTES = 1_048_576

/** Resolves, validates and freezes adapter options once, at start-up: a bad one fails before any request. */
export function resolveAdapterOptions<Req, Tx>(options: AdapterOptions<Req, Tx>): ResolvedAdapterOptions<Req, Tx> {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  const { engine, scope } = options
  if (typeof engine !== 'object' || engine === null || typeof engine.begin !== 'function') {
    throw invalid('engine', 'must be an engine from createEngine({ store })', engine)
  }
  if (typeof scope !== 'function' && scope !== 'global') {
    throw invalid('scope', "is required: a function giving the user of a request, or 'global' to share one scope among all callers", scope)
  }
  const methods = stringList('methods', options.methods ?? DEFAULT_GUARDED_METHODS).map((m) => m.toUpperCase())
  const query = stringList('query', options.query ?? [])
  const maxStoredBodyBytes = positiveInteger('maxStoredBodyBytes', options.maxStoredBodyBytes ?? DEFAULT_MAX_STORED_BODY_BYTES)
  const routes = optionalFunction('routes', options.routes)
  const onOutcome = optionalFunction('onOutcome', options.onOutcome)
  const log = neverThrowing(resolveLogger(options.log, 'log'))
  return Object.freeze({
    engine,
    scope: scope === 'global' ? async () => 'global' : async (request: Req) => scope(request),
    methods: new Set(methods),
    routes,
    query: Object.freeze(query),
    maxStoredBodyBytes,
    redact: optionalFunction('redact', options.redact),
    required: optionalBoolean('required', options.required) ?? true,
    excludeBodyFields: parsePointers('excludeBodyFields', options.excludeBodyFields ?? []),
    xIdempotentReplayed: optionalBoolean('xIdempotentReplayed', options.xIdempotentReplayed) ?? false,
    waitMs: resolveWaitMs(options.waitMs),
    keyTtlSeconds: advertisedTtlSeconds(engine, optionalBoolean('keyTtlHeader', options.keyTtlHeader) ?? true),
    log,
    onOutcome,
  })
}

/** A number is checked now; a function's answer on each request, naming the option when it is bad. */
function resolveWaitMs(waitMs: AdapterOptions<never>['waitMs']): (method: string, route: string) => number {
  const checked = (value: unknown): number => {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw invalid('waitMs', 'must be a whole number of milliseconds, 0 or more', value)
    return value
  }
  if (typeof waitMs === 'function') return (method, route) => checked(waitMs(method, route))
  const fixed = checked(waitMs ?? 0)
  return () => fixed
}

/** Whole seconds, rounded down: the key is remembered at least that long. An engine without options (a test double) advertises nothing. */
function advertisedTtlSeconds(engine: Engine<unknown>, advertise: boolean): number | undefined {
  const ttlMs = (engine as Partial<Engine<unknown>>).options?.ttlMs
  return advertise && typeof ttlMs === 'number' ? Math.floor(ttlMs / 1000) : undefined
}

/** A logger that throws must never turn an answered request into a crash. */
function neverThrowing(logger: Logger): Logger {
  const guarded =
    (level: keyof Logger): Logger[keyof Logger] =>
    (fields, message) => {
      try {
        logger[level](fields, message)
      } catch {
        // Dropped: the answer matters more than its log line.
      }
    }
  return Object.freeze({ info: guarded('info'), warn: guarded('warn'), error: guarded('error') })
}
