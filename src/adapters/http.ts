import { currentFingerprint, fingerprintRequest, pickQuery, type FingerprintInput } from '../engine/fingerprint.js'
import { isOncelyError } from '../errors.js'
import { conflictAnswer, problem, PROBLEM_TYPES, replayAnswer, storeUnavailableAnswer, type HttpAnswer } from './answers.js'
import { withoutFields } from './excluded-fields.js'
import { GuardedExecution, report, type DecidedRequest, type Outcome } from './guarded-execution.js'
import { codeOf, describeForLog, requestLogFields } from './log-fields.js'
import { withKeyTtl } from './key-ttl.js'
import type { ResolvedAdapterOptions } from './options.js'
import type { RequestParts } from './request-context.js'
import { beginWaiting } from './waiting.js'

export * from './answers.js'
export * from './key-ttl.js'
export * from './options.js'
export * from './request-context.js'
export * from './stored-headers.js'
export { GuardedExecution } from './guarded-execution.js'
export { responseClosed, signalAborted, type ClientGone } from './waiting.js'

/**
 * What the guard decided: send `answer` as it is; run the handler under `guard` and end it with
 * `guard.settle(captured)`; or run the handler unguarded (`required: false`, no key) and call
 * `finish(status)` once the response is sent.
 */
export type Gate<Tx> =
  | { kind: 'answer'; answer: HttpAnswer }
  | { kind: 'execute'; guard: GuardedExecution<Tx> }
  | { kind: 'unkeyed'; finish: (status: number) => void }

/** Whether a request needs a key, by the `methods` and `routes` options. */
export function isGuarded(options: ResolvedAdapterOptions<never, unknown>, method: string, path: string): boolean {
  return options.methods.has(method.toUpperCase()) && (options.routes?.(method, path) ?? true)
}

/**
 * Asks the engine about a guarded request. Every answer but `execute` is final and reported to
 * `onOutcome` here; an `execute` must be ended with `guard.settle(captured)`.
 */
export async function beginGuarded<Req, Tx>(options: ResolvedAdapterOptions<Req, Tx>, request: Req, parts: RequestParts): Promise<Gate<Tx>> {
  const startedAt = performance.now()
  let decided: DecidedRequest | undefined
  const ttl = options.keyTtlSeconds
  const answer = (outcome: Outcome, response: HttpAnswer): Gate<Tx> => {
    report(options, outcome, response.status, startedAt, response.instance, undefined, decided)
    return { kind: 'answer', answer: withKeyTtl(response, ttl) }
  }
  // Before the claim: nothing ran for this request, so a new key cannot run anything twice.
  const nothingRan = { newKeySafe: true, state: 'none' } as const
  const sentKey = parts.key === undefined || parts.key === null ? undefined : typeof parts.key === 'string' ? parts.key : parts.key.join(', ')
  if (sentKey === undefined && !options.required) {
    return { kind: 'unkeyed', finish: (status) => report(options, 'unkeyed', status, startedAt) }
  }
  if (parts.bodyNotRead) {
    // Issue 8 path 14: a fingerprint without the body would replay a different request.
    const detail = `${parts.method.toUpperCase()} ${parts.route} has a request body the idempotency guard cannot see: mount a body parser for its content type (express.json(), express.raw() …) before idempotency()`
    const refusal = problem({ status: 500, type: PROBLEM_TYPES.bodyNotRead, title: 'Request body not read', detail, retryable: false, advice: nothingRan, keyTtlSeconds: ttl })
    options.log.error({ ...requestLogFields({ method: parts.method, route: parts.route, key: sentKey }), instance: refusal.instance }, `oncely: ${detail}`)
    return answer('failed', refusal)
  }
  const scope = await options.scope(request)
  // Made once, after the scope: hashing the key for log lines is a sha256 per request.
  const fields = requestLogFields({ method: parts.method, route: parts.route, ...(typeof scope === 'string' || typeof scope === 'number' ? { scope } : {}), key: sentKey })
  if (scope === undefined || scope === '') {
    return answer('invalid', problem({ status: 401, type: PROBLEM_TYPES.unauthenticated, title: 'Unauthenticated', detail: 'this request must be authenticated to use an Idempotency-Key', retryable: false, advice: nothingRan, keyTtlSeconds: ttl }))
  }
  const fingerprintInput: FingerprintInput = {
    method: parts.method,
    route: parts.route,
    params: parts.params ?? {},
    query: pickQuery(normalizeQuery(parts.query ?? {}), options.query),
    body: withoutFields(parts.body, options.excludeBodyFields),
    ...(parts.mediaType === undefined ? {} : { mediaType: parts.mediaType }),
  }
  // The earlier rule's hash is made only for a key stored by it (issue 21).
  const fingerprint = currentFingerprint(fingerprintInput)
  const earlierFingerprint = () => fingerprintRequest(fingerprintInput)
  const waitMs = options.waitMs(parts.method, parts.route)
  let decision
  try {
    decision = await beginWaiting(options.engine, { scope, key: parts.key, fingerprint, earlierFingerprint }, waitMs, parts.clientGone)
  } catch (error) {
    if (isOncelyError(error, 'ONCELY_INVALID_SCOPE')) {
      // A bug in the scope option, not an outage: retrying cannot help.
      const detail = 'the scope option gave neither a non-empty string nor a finite number for this request'
      const refusal = problem({ status: 500, type: 'about:blank', title: 'Internal Server Error', detail, retryable: false, advice: nothingRan, keyTtlSeconds: ttl })
      options.log.error({ ...fields, code: 'ONCELY_INVALID_SCOPE', instance: refusal.instance }, `oncely: ${describeForLog(error, sentKey)}`)
      return answer('failed', refusal)
    }
    if (isOncelyError(error, 'ONCELY_DECRYPTION_FAILED')) {
      // Issue 23: an encrypted record that does not open is a key to put back, not an outage;
      // never its ciphertext replayed, never the operation run again.
      const detail = 'the stored record of this Idempotency-Key is encrypted and could not be decrypted; it is not replayed and not run again, quote the instance to support'
      const refusal = problem({ status: 500, type: PROBLEM_TYPES.recordUnreadable, title: 'Idempotency record unreadable', detail, retryable: false, advice: { newKeySafe: false, state: 'unknown' }, keyTtlSeconds: ttl })
      options.log.error({ ...fields, code: 'ONCELY_DECRYPTION_FAILED', instance: refusal.instance }, `oncely: ${describeForLog(error, sentKey)}`)
      return answer('failed', refusal)
    }
    const unavailable = storeUnavailableAnswer('the idempotency record could not be read; retry with the same key', ttl)
    options.log.error({ ...fields, ...codeOf(error), instance: unavailable.instance }, `oncely: the idempotency store failed to answer: ${describeForLog(error, sentKey)}`)
    return answer('failed', unavailable)
  }
  if (decision.kind !== 'invalid' && typeof parts.key === 'string') decided = { scope: String(scope), key: parts.key, fingerprint }
  switch (decision.kind) {
    case 'execute':
      return { kind: 'execute', guard: new GuardedExecution(options, decision.execution, startedAt, fields, fingerprint) }
    case 'replay':
      return answer('replayed', replayAnswer(decision.response, options.xIdempotentReplayed))
    case 'conflict':
      return answer('conflict', conflictAnswer(decision.retryAfterSeconds, 'a request with this Idempotency-Key is still being processed; retry later', ttl))
    case 'mismatch': {
      const detail = 'this Idempotency-Key was already used with a different request'
      // The key names an operation that exists: whether this request is a new one or an altered
      // retry of it, only the client knows, so a new key is not called safe.
      const advice = { newKeySafe: false, state: decision.state }
      return answer('mismatch', problem({ status: 422, type: PROBLEM_TYPES.keyReused, title: 'Idempotency-Key reused', detail, retryable: false, advice, keyTtlSeconds: ttl, idempotencyKey: sentKey }))
    }
    case 'invalid':
      return sentKey === undefined
        ? answer('invalid', problem({ status: 400, type: PROBLEM_TYPES.keyMissing, title: 'Idempotency-Key missing', detail: `${parts.method.toUpperCase()} ${parts.route} requires an Idempotency-Key header`, retryable: false, advice: nothingRan, keyTtlSeconds: ttl }))
        : answer('invalid', problem({ status: 400, type: PROBLEM_TYPES.keyInvalid, title: 'Idempotency-Key invalid', detail: decision.reason, retryable: false, advice: nothingRan, keyTtlSeconds: ttl, idempotencyKey: sentKey }))
  }
}

function normalizeQuery(query: Readonly<Record<string, unknown>>): Record<string, string | readonly string[] | undefined> {
  const out: Record<string, string | readonly string[] | undefined> = {}
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined) continue
    if (Array.isArray(value)) out[name] = value.length === 1 ? String(value[0]) : value.map(String)
    else out[name] = typeof value === 'string' ? value : JSON.stringify(value)
  }
  return out
}
