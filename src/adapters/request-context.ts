import type { Execution } from '../engine/execution.js'
import type { WriteStatement } from '../engine/types.js'
import type { HeaderValue } from './stored-headers.js'
import type { ClientGone } from './waiting.js'

/**
 * Register your store's transaction type once, and `req.idempotency` (Express) and
 * `request.idempotency` (Fastify) carry it, so business writes need no cast:
 * `declare module 'oncely/express' { interface IdempotencyRegister { tx: Queryable } }`.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- filled by the user's module augmentation
export interface IdempotencyRegister {}

/** The transaction type registered in `IdempotencyRegister`, `unknown` until one is. */
export type RegisteredTx = IdempotencyRegister extends { tx: infer Tx } ? Tx : unknown

/**
 * Work to run inside the transaction that completes the key. Declared as a method so a handler
 * may name its store's transaction type (`async (tx: Queryable) => …`) where the framework's
 * request type cannot carry it.
 */
export type CompletionWork<Tx> = { bivariant(tx: Tx): Promise<void> }['bivariant']

/** What a guarded handler sees: its execution, and a way to write business rows with the completion. */
export interface IdempotencyContext<Tx = unknown> {
  /** Runs steps (`execution.step(name, fn)`) with keys the provider dedupes. */
  readonly execution: Execution<Tx>
  /**
   * Registers business writes that commit in the transaction that stores the response, or not
   * at all (Invariant 8). They run only when the response is stored (`status < 400`, or a 4xx
   * after a step), in registration order. A write given as a statement (`{ text, values }`)
   * instead of a function is sent unawaited: when every write is one, BEGIN, the completion, the
   * writes and COMMIT leave together, one round trip on a pipelining pool (issue 11).
   *
   * @example
   * ```ts
   * import type { IdempotencyContext } from 'oncely/hono'
   * import type { Queryable } from 'oncely/postgres'
   * declare const context: IdempotencyContext<Queryable>
   * context.writeOnCompletion({ text: 'INSERT INTO charges (id) VALUES ($1)', values: [id] })
   * ```
   */
  readonly writeOnCompletion: (this: void, work: CompletionWork<Tx> | WriteStatement) => void
}

/** The parts of a request that enter its fingerprint, plus its key header. */
export interface RequestParts {
  method: string
  /** The matched route pattern (`/v1/charges/:id`), or the path when there is none. */
  route: string
  params?: Readonly<Record<string, string>>
  query?: Readonly<Record<string, unknown>>
  /** The parsed JSON body, or raw bytes. */
  body?: unknown
  /** True when the request has a body that nobody parsed (a body parser missing or mounted after the guard). */
  bodyNotRead?: boolean
  /** The request's `Content-Type`: a text body and a JSON string body never share a fingerprint. */
  mediaType?: string | undefined
  key: string | readonly string[] | undefined | null
  /** Tells when the client goes away, so a duplicate waiting for the first request (`waitMs`) stops. (Default: none) */
  clientGone?: ClientGone
}

/** The response a handler produced, as an adapter captured it. */
export type CapturedResponse =
  | { kind: 'response'; status: number; headers: Iterable<readonly [string, HeaderValue]>; body: Uint8Array }
  /**
   * The client got (the start of) a streamed response that cannot be stored whole: its body grew
   * past `maxStoredBodyBytes`, or it was cut by an error or by the client going away after it
   * started. The handler ran: the outcome is recorded with a result-unavailable problem.
   */
  | { kind: 'unstorable'; status: number; reason: string }
  /** The handler threw; the framework's error handling answers. */
  | { kind: 'thrown'; error: unknown }
