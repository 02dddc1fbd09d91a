import { OncelyError } from '../errors.js'
import { invalid } from '../option-validation.js'
import { boundedWait } from './bounded-wait.js'
import { ClientAbortedError } from './client-errors.js'
import { fingerprintOf } from './fingerprint.js'
import type { OperationRecord } from './key-store.js'
import { resolveClientOptions, resolveHeaders, type ClientOptions, type ResolvedClientOptions } from './options.js'
import { encodeBody, type FingerprintBody, type RequestBody } from './request-body.js'
import { withFinishError, type ClientResponse } from './response.js'
import { redactUrl } from './redact-url.js'
import { sendWithRetries } from './send-with-retries.js'

/** Options of one call. */
export interface CallOptions {
  /** Headers for this call, over the client's. (Default: none) */
  readonly headers?: Readonly<Record<string, string>>
  /**
   * Stops the call, the key store and waits included; it then rejects with
   * `ONCELY_CLIENT_ABORTED`. Once the whole final response has arrived, an abort no longer
   * discards it: the call resolves with it (see `ClientResponse.finishError`). (Default: none)
   */
  readonly signal?: AbortSignal
}

/** Options of a call that carries an `Idempotency-Key` (POST, PATCH). */
export interface KeyedCallOptions extends CallOptions {
  /**
   * Names the logical operation, such as `order-42:charge`. Its key is minted once, persisted
   * in the key store before the first attempt, and sent by every attempt of every call with
   * this name until the record is pruned. Without it the call mints a key of its own, which
   * its retries share but a restarted process cannot find. (Default: none)
   */
  readonly operationId?: string
}

export interface CallInit extends KeyedCallOptions {
  readonly body?: RequestBody
}

/** A client that sends each logical operation once; see `createClient`. */
export interface OncelyClient {
  readonly options: ResolvedClientOptions
  /** POST with an `Idempotency-Key`; retried when safe. */
  post(path: string, body?: RequestBody, options?: KeyedCallOptions): Promise<ClientResponse>
  /** PATCH with an `Idempotency-Key`; retried when safe. */
  patch(path: string, body?: RequestBody, options?: KeyedCallOptions): Promise<ClientResponse>
  /** PUT, retried without a key: it is idempotent by definition. */
  put(path: string, body?: RequestBody, options?: CallOptions): Promise<ClientResponse>
  /** GET, retried without a key. */
  get(path: string, options?: CallOptions): Promise<ClientResponse>
  /** DELETE, retried without a key. */
  delete(path: string, options?: CallOptions): Promise<ClientResponse>
  /** Any method; every method but GET, HEAD, OPTIONS, PUT and DELETE carries a key. */
  request(method: string, path: string, init?: CallInit): Promise<ClientResponse>
  /** Deletes finished operations past their TTL from the key store; returns how many. */
  prune(now?: Date): Promise<number>
}

/** The least time a final response gets for the key store to mark its operation finished. */
const FINISH_GRACE_MS = 1000

/** Methods idempotent by definition (RFC 9110 §9.2.2): retried as they are, with no key. */
const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'])

/**
 * Creates a client whose POST and PATCH carry an `Idempotency-Key` minted once per logical
 * operation and persisted before the first attempt, and which retries only what is safe.
 *
 * @example
 * ```ts
 * import { createClient, fileKeyStore } from 'oncely/client'
 * const client = createClient({
 *   baseUrl: 'http://127.0.0.1:3000',
 *   keyStore: fileKeyStore('./.oncely/keys'),
 *   headers: { authorization: 'Bearer demo_42' },
 * })
 * const res = await client.post('/v1/charges', { amount: 1000, currency: 'usd', customer: 'cus_42' },
 *   { operationId: 'order-42:charge' })
 * ```
 */
export function createClient(options: ClientOptions): OncelyClient {
  const resolved = resolveClientOptions(options)

  async function request(method: string, path: string, init: CallInit = {}): Promise<ClientResponse> {
    // The deadline counts from here: the key store's claim is part of the call.
    const deadlineAt = performance.now() + resolved.deadlineMs
    const verb = resolveMethod(method)
    const url = resolveUrl(resolved.baseUrl, path)
    const keyed = !IDEMPOTENT_METHODS.has(verb)
    const { body, operationId, signal } = init
    if (operationId !== undefined && (typeof operationId !== 'string' || operationId.length === 0 || operationId.length > 1024)) {
      throw invalid('operationId', 'must be a string of 1 to 1024 characters', operationId)
    }
    if (operationId !== undefined && !keyed) {
      throw invalid('operationId', `must be left out of ${verb} requests, which are idempotent and retried without a key`, operationId)
    }
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      throw invalid('signal', 'must be an AbortSignal', signal)
    }
    const headers = new Headers(resolved.headers)
    for (const [name, value] of Object.entries(resolveHeaders('call headers', init.headers ?? {}))) headers.set(name, value)
    const encoded = encodeBody(body, headers.get('content-type'))
    if (encoded.contentType && !headers.has('content-type')) headers.set('content-type', encoded.contentType)
    if (signal?.aborted) throw new ClientAbortedError(`${verb} ${redactUrl(url)}: aborted before anything was sent`, [], signal.reason)

    let key: string | undefined
    if (keyed) {
      key = operationId === undefined ? resolved.mintKey() : await keyForOperation(operationId, verb, url, encoded.fingerprint(), deadlineAt, signal)
      headers.set('idempotency-key', key)
    }
    const response = await sendWithRetries({ method: verb, url, headers, body: encoded.bytes, key, operationId, signal, deadlineAt }, resolved)
    if (operationId === undefined) return response
    // Issue 22: the response is the operation's answer; a store that cannot record it is
    // reported beside it, never instead of it (a caller that saw only an error might try again
    // under a new operationId and run the operation twice).
    const finishError = await finishOperation(operationId, response.status, deadlineAt, signal)
    return finishError === undefined ? response : withFinishError(response, finishError)
  }

  /** The operation's key: persisted durably before the first attempt, or refused on mismatch. */
  async function keyForOperation(operationId: string, method: string, url: string, body: FingerprintBody, deadlineAt: number, signal: AbortSignal | undefined): Promise<string> {
    const fingerprint = fingerprintOf(method, url, body)
    const candidate: OperationRecord = {
      operationId,
      key: resolved.mintKey(),
      fingerprint,
      createdAt: new Date(),
      finishedAt: null,
      finalStatus: null,
      expiresAt: null,
    }
    let claimed: Awaited<ReturnType<typeof boundedWait<OperationRecord>>>
    try {
      claimed = await boundedWait(resolved.keyStore.claim(candidate), deadlineAt - performance.now(), signal)
    } catch (error) {
      throw new OncelyError('ONCELY_KEY_STORE_FAILED', `oncely client: could not persist the key of operation ${JSON.stringify(operationId)}; nothing was sent`, { cause: error })
    }
    if (claimed.kind === 'aborted') {
      throw new ClientAbortedError(`operation ${JSON.stringify(operationId)}: aborted while the key store was keeping its key; nothing was sent`, [], signal?.reason)
    }
    if (claimed.kind === 'deadline') {
      throw new OncelyError('ONCELY_KEY_STORE_FAILED', `oncely client: the key store did not keep the key of operation ${JSON.stringify(operationId)} within the deadline of ${resolved.deadlineMs} ms; nothing was sent`)
    }
    const record = claimed.value
    if (typeof record?.key !== 'string' || record.key.length === 0) {
      throw new OncelyError('ONCELY_KEY_STORE_FAILED', `oncely client: the key store returned no key for operation ${JSON.stringify(operationId)}; nothing was sent`)
    }
    if (record.fingerprint !== fingerprint) {
      throw new OncelyError(
        'ONCELY_CLIENT_OPERATION_MISMATCH',
        `oncely client: operation ${JSON.stringify(operationId)} was first used for a different request (method, URL or body); nothing was sent. A new operation needs a new operationId.`,
      )
    }
    return record.key
  }

  /** Marks the operation finished; what went wrong, if it could not, as the error to report. */
  async function finishOperation(operationId: string, status: number, deadlineAt: number, signal: AbortSignal | undefined): Promise<OncelyError | undefined> {
    const finishedAt = new Date()
    const outcome = { finishedAt, finalStatus: status, expiresAt: new Date(finishedAt.getTime() + resolved.keyTtlMs) }
    const failed = (reason: string, cause: unknown): OncelyError =>
      new OncelyError(
        'ONCELY_KEY_STORE_FAILED',
        `oncely client: operation ${JSON.stringify(operationId)} got its final response (${status}) but the key store could not mark it finished (${reason}); the response is returned, the record stays unfinished, and calling again with the same operationId sends the same key (the server replays)`,
        { cause },
      )
    let writing: Promise<void>
    try {
      writing = Promise.resolve(resolved.keyStore.finish(operationId, outcome))
    } catch (error) {
      return failed('it threw', error)
    }
    try {
      // A response that came just before the deadline still gets a moment to be recorded, and so
      // does one the caller aborted after it arrived: the write is what keeps the next call from
      // being blind, and a second bounds what the abort waits for.
      const first = await boundedWait(writing, Math.max(deadlineAt - performance.now(), FINISH_GRACE_MS), signal)
      const finished = first.kind === 'aborted' ? await boundedWait(writing, FINISH_GRACE_MS, undefined) : first
      if (finished.kind === 'done') return undefined
      const reason = first.kind === 'aborted'
        ? `the call was aborted and the key store had not answered ${FINISH_GRACE_MS} ms later`
        : `the key store did not answer within the deadline of ${resolved.deadlineMs} ms`
      return failed(reason, new Error(reason))
    } catch (error) {
      return failed('it failed', error)
    }
  }

  return Object.freeze({
    options: resolved,
    request,
    post: (path: string, body?: RequestBody, options?: KeyedCallOptions) => request('POST', path, { ...options, ...definedBody(body) }),
    patch: (path: string, body?: RequestBody, options?: KeyedCallOptions) => request('PATCH', path, { ...options, ...definedBody(body) }),
    put: (path: string, body?: RequestBody, options?: CallOptions) => request('PUT', path, { ...options, ...definedBody(body) }),
    get: (path: string, options?: CallOptions) => request('GET', path, options),
    delete: (path: string, options?: CallOptions) => request('DELETE', path, options),
    prune: (now?: Date) => resolved.keyStore.prune(now),
  })
}

function definedBody(body: RequestBody | undefined): { body?: RequestBody } {
  return body === undefined ? {} : { body }
}

function resolveMethod(method: unknown): string {
  if (typeof method !== 'string' || !/^[A-Za-z]+$/.test(method)) {
    throw invalid('method', 'must be an HTTP method name (letters only)', method)
  }
  return method.toUpperCase()
}

function resolveUrl(baseUrl: string, path: unknown): string {
  if (typeof path !== 'string' || !path.startsWith('/')) {
    throw invalid('path', "must start with '/'", path)
  }
  return baseUrl + path
}
