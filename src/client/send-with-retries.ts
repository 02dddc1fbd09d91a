import { setTimeout as sleep } from 'node:timers/promises'
import { describeAttempt, type Attempt } from './attempt.js'
import { attemptBody } from './body-stream.js'
import { backoffDelay, parseRetryAfter } from './backoff.js'
import { ClientAbortedError, ClientGaveUpError, ClientRequestFailedError } from './client-errors.js'
import type { ResolvedClientOptions } from './options.js'
import { clientResponse, type ClientResponse } from './response.js'
import { redactUrl } from './redact-url.js'
import { honoursRetryAfter, isWorthRetrying, networkFailureCode } from './retry-policy.js'

/** One call, rendered once: every attempt sends exactly these bytes and this key. */
export interface PreparedRequest {
  readonly method: string
  readonly url: string
  readonly headers: Headers
  readonly body: Uint8Array | undefined
  readonly key: string | undefined
  readonly operationId: string | undefined
  readonly signal: AbortSignal | undefined
  /** When the call must end (`performance.now()` time), counted from the call's start. */
  readonly deadlineAt: number
}

type AttemptResult =
  | { readonly kind: 'response'; readonly status: number; readonly headers: Headers; readonly body: Buffer }
  | { readonly kind: 'error'; readonly error: Error }

/**
 * Sends `request` until a response that is not worth retrying arrives, then returns it (any
 * status: a 422 is an answer, and so is a 3xx, never followed). Network failures, attempt
 * timeouts, 5xx, 408, 409, 425 and 429 are retried with full-jitter backoff, or after
 * `Retry-After` on 409, 429 and 503, within `maxAttempts` and the deadline; never a response
 * whose problem says `retry_same_key: false`.
 */
export async function sendWithRetries(request: PreparedRequest, options: ResolvedClientOptions): Promise<ClientResponse> {
  const deadline = request.deadlineAt
  const attempts: Attempt[] = []
  let delayMs = 0
  for (let number = 1; ; number++) {
    if (request.signal?.aborted) throw aborted(attempts, request)
    const remaining = deadline - performance.now()
    if (remaining <= 0) throw gaveUp(`deadline of ${options.deadlineMs} ms reached`, attempts, undefined, request)
    const started = performance.now()
    const result = await attemptOnce(request, Math.ceil(Math.min(options.attemptTimeoutMs, remaining)), options.fetch)
    // An attempt the abort cut short has no outcome of its own to report.
    if (result.kind === 'error' && request.signal?.aborted) throw aborted(attempts, request)
    const attempt: Attempt = {
      number,
      key: request.key,
      delayMs,
      status: result.kind === 'response' ? result.status : undefined,
      error: result.kind === 'error' ? result.error : undefined,
      networkFailure: result.kind === 'error' ? networkFailureCode(result.error) : undefined,
      durationMs: performance.now() - started,
    }
    attempts.push(attempt)
    let response: ClientResponse | undefined
    if (result.kind === 'response') {
      response = clientResponse(result.status, result.headers, result.body, request.key, [...attempts])
      // The whole final response has arrived: an abort from here on no longer discards it, or
      // the caller would take a 201 for a failure (issue 22).
      if (!isWorthRetrying(result.status, response.advice)) return response
      if (request.signal?.aborted) throw aborted(attempts, request)
    } else if (attempt.networkFailure === undefined && !(result.error instanceof AttemptTimeoutError)) {
      throw new ClientRequestFailedError(`${describeRequest(request)}: not retried, ${describeAttempt(attempt)}`, [...attempts], result.error)
    }

    if (number >= options.maxAttempts) throw gaveUp(`${number} attempts made (maxAttempts)`, attempts, response, request)
    delayMs = nextDelay(number, result, options)
    if (performance.now() + delayMs >= deadline) {
      throw gaveUp(`the next attempt, in ${delayMs} ms, would pass the deadline of ${options.deadlineMs} ms`, attempts, response, request)
    }
    options.onRetry?.({ method: request.method, url: request.url, operationId: request.operationId, attempt, delayMs })
    try {
      await sleep(delayMs, undefined, { signal: request.signal })
    } catch (error) {
      if (request.signal?.aborted) throw aborted(attempts, request)
      throw error
    }
  }
}

/** A `Retry-After` on 409, 429 and 503 (capped), else full-jitter backoff. */
function nextDelay(retry: number, result: AttemptResult, options: ResolvedClientOptions): number {
  if (result.kind === 'response' && honoursRetryAfter(result.status)) {
    const retryAfter = parseRetryAfter(result.headers.get('retry-after'))
    if (retryAfter !== undefined) return Math.min(retryAfter, options.maxRetryAfterMs)
  }
  return backoffDelay(retry, options.baseDelayMs, options.maxDelayMs, options.random)
}

/** The attempt's timer fired before the whole response arrived. */
export class AttemptTimeoutError extends Error {
  override name = 'AttemptTimeoutError'
}

async function attemptOnce(request: PreparedRequest, timeoutMs: number, fetch: typeof globalThis.fetch): Promise<AttemptResult> {
  const timeout = AbortSignal.timeout(timeoutMs)
  const signal = request.signal ? AbortSignal.any([request.signal, timeout]) : timeout
  try {
    // A redirect is returned, never followed: a 303 would turn the POST into a GET that still
    // carries the key, and a 307 would send the key and the caller's credentials elsewhere.
    const { body, duplex, contentLength } = attemptBody(request.body)
    const headers = contentLength === undefined ? request.headers : withContentLength(request.headers, contentLength)
    const init: RequestInit & { duplex?: 'half' } = { method: request.method, headers, body, signal, redirect: 'manual', ...(duplex ? { duplex } : {}) }
    const res = await fetch(request.url, init)
    // The body is read inside the attempt: a cut halfway through it is a failed attempt.
    const received = Buffer.from(await res.arrayBuffer())
    return { kind: 'response', status: res.status, headers: res.headers, body: received }
  } catch (error) {
    if (timeout.aborted && !request.signal?.aborted) {
      return { kind: 'error', error: new AttemptTimeoutError(`no whole response within ${timeoutMs} ms`, { cause: error }) }
    }
    return { kind: 'error', error: error instanceof Error ? error : new Error(String(error)) }
  }
}

function withContentLength(headers: Headers, contentLength: string): Headers {
  const copy = new Headers(headers)
  copy.set('content-length', contentLength)
  return copy
}

function gaveUp(reason: string, attempts: readonly Attempt[], response: ClientResponse | undefined, request: PreparedRequest): ClientGaveUpError {
  const last = attempts.at(-1)
  const lastText = last ? `; last ${describeAttempt(last)}` : ''
  return new ClientGaveUpError(`${describeRequest(request)}: gave up, ${reason}${lastText}`, [...attempts], response)
}

function aborted(attempts: readonly Attempt[], request: PreparedRequest): ClientAbortedError {
  return new ClientAbortedError(`${request.method} ${redactUrl(request.url)}: aborted after ${attempts.length} attempt(s)`, [...attempts], request.signal?.reason)
}

/** `POST https://host/path?name=*** (Idempotency-Key …)`: query values and credentials never reach a message. */
function describeRequest(request: PreparedRequest): string {
  const key = request.key ? ` (Idempotency-Key ${request.key})` : ''
  return `${request.method} ${redactUrl(request.url)}${key}`
}
