import { OncelyError } from '../errors.js'
import { invalid } from '../option-validation.js'
import { claimKey } from './claim.js'
import type { KeyState } from './decide.js'
import { publishDecision } from './events.js'
import { Execution } from './execution.js'
import { inspectOperation, type InspectInput, type OperationRecord } from './inspect.js'
import { parseIdempotencyKey } from './key.js'
import { resolveEngineOptions, type EngineOptions, type ResolvedEngineOptions } from './options.js'
import type { StoredResponse } from './types.js'
import { waitOutConflict, type WaitOptions } from './wait.js'

/** A request as the engine sees it: no HTTP types. */
export interface BeginInput {
  /**
   * Whose key it is: the user or account id. A number is read as its decimal string (`42` and
   * `'42'` are one scope); anything else throws `ONCELY_INVALID_SCOPE` before the claim.
   */
  scope: string | number
  /** The raw `Idempotency-Key` value; validated here. */
  key: string | readonly string[] | undefined | null
  /** `fingerprintRequest(...)` of the request. */
  fingerprint: string
  /**
   * The request's fingerprint by the earlier rules too, asked for only when the key was stored by
   * one (a key from before a deploy that changed the rule): `fingerprint` may then carry the
   * current rule's part alone (`currentFingerprint`), and no request pays for hashing by a rule
   * its key was not made with (issue 21). (Default: `fingerprint` alone is compared)
   */
  earlierFingerprint?: () => string
}

/**
 * The engine's answer to a request (docs/conventions.md, Shape: protocol answers are values). `adapters/http`
 * turns each into a status, headers and a problem+json body.
 */
export type Decision<Tx = unknown> =
  /** This caller owns the key and runs the operation. */
  | { kind: 'execute'; execution: Execution<Tx> }
  /** The operation finished earlier: answer with this response, verbatim. */
  | { kind: 'replay'; response: StoredResponse }
  /** The operation is running elsewhere: 409, retry after the hint. */
  | { kind: 'conflict'; retryAfterSeconds: number }
  /** The key was used with a different request: 422, never a replay. `state` is the key's own operation. */
  | { kind: 'mismatch'; state: KeyState }
  /** The key is missing or malformed: 400, nothing stored. */
  | { kind: 'invalid'; reason: string }

/** What the failure policy does with a claim whose handler threw. */
export type FailureAction =
  /** Delete the claim: the key may be retried as new. Only safe before any side effect. */
  | { action: 'release' }
  /** Keep the committed steps and let the next retry resume at once. */
  | { action: 'suspend' }
  /** Store this response as the outcome; retries replay it. */
  | { action: 'store'; response: StoredResponse }

/** Picks the failure action for an error thrown by a handler. */
export type FailurePolicy = (error: unknown, execution: Execution<unknown>) => FailureAction

/**
 * Invariant 7, the default: before any step could have had a side effect, release (nothing
 * happened, so the key can be retried); after, suspend (the retry resumes with the same step
 * keys, so the provider dedupes). Never a blind re-execution.
 */
export const defaultFailurePolicy: FailurePolicy = (_error, execution) =>
  execution.sideEffectsPossible ? { action: 'suspend' } : { action: 'release' }

/** The result of `engine.run`. */
export type RunResult<Tx = unknown> =
  | Exclude<Decision<Tx>, { kind: 'execute' }>
  | { kind: 'executed'; response: StoredResponse }

export interface Engine<Tx = unknown> {
  readonly options: ResolvedEngineOptions<Tx>
  /**
   * Decides what to do with a request, in one round trip to the store in the common cases. With
   * `wait.waitMs`, a request whose key is in use waits up to that long for the first to finish
   * (woken by the store when it can, reading the row now and then, holding no connection in
   * between) and gets its replay, or
   * owns the key if the first let it go; only past the bound does it get the conflict.
   *
   * @example
   * ```ts
   * const decision = await engine.begin({ scope: '42', key: req.headers['idempotency-key'], fingerprint })
   * if (decision.kind === 'execute') {
   *   const charge = await decision.execution.step('charge', ({ providerKey }) => provider.charge({ amount: 1000 }, providerKey))
   *   await decision.execution.complete({ status: 201, headers: [], body: Buffer.from(JSON.stringify(charge)) })
   * }
   * ```
   */
  begin(input: BeginInput, wait?: WaitOptions): Promise<Decision<Tx>>
  /**
   * `begin`, then runs `handler` when this caller owns the key and stores what it returns. If the
   * handler throws, `onFailure` (default `defaultFailurePolicy`) decides what is kept, and the
   * error is re-thrown unless the policy stored a response.
   */
  run(
    input: BeginInput,
    handler: (execution: Execution<Tx>) => Promise<StoredResponse>,
    options?: { onFailure?: FailurePolicy } & WaitOptions,
  ): Promise<RunResult<Tx>>
  /**
   * Looks an operation up by scope and key, for support tools: its state, steps and stored
   * response, or null when there is none. Read-only, one round trip through the store's `read`
   * (a Redis cache in front passes it through). Store errors reject.
   *
   * @example
   * ```ts
   * const operation = await engine.inspect({ scope: '42', key: 'order-42' })
   * if (operation?.state === 'completed') console.log(operation.response?.status, Object.keys(operation.steps))
   * ```
   */
  inspect(input: InspectInput): Promise<OperationRecord | null>
}

/**
 * Creates the engine: the state machine of one key, framework-agnostic.
 *
 * @example
 * ```ts
 * import pg from 'pg'
 * import { createEngine } from 'oncely'
 * import { createPostgresStore } from 'oncely/postgres'
 * const engine = createEngine({ store: createPostgresStore({ pool: new pg.Pool() }), staleAfterMs: 30_000 })
 * ```
 */
export function createEngine<Tx>(options: EngineOptions<Tx>): Engine<Tx> {
  const resolved = resolveEngineOptions(options)

  async function begin(input: BeginInput, wait?: WaitOptions): Promise<Decision<Tx>> {
    const scope = scopeOf(input.scope)
    const waitMs = waitOf(wait)
    const parsed = parseIdempotencyKey(input.key)
    if (!parsed.ok) return publishDecision(scope, input.key, { kind: 'invalid', reason: parsed.reason })
    const request = { scope, key: parsed.key, fingerprint: input.fingerprint, ...(input.earlierFingerprint === undefined ? {} : { earlierFingerprint: input.earlierFingerprint }) }
    let outcome = await claimKey(request, resolved)
    if (outcome.kind === 'conflict' && waitMs > 0) outcome = await waitOutConflict(request, outcome, resolved, { ...wait, waitMs })
    if (outcome.kind === 'conflict') return publishDecision(scope, parsed.key, { kind: 'conflict', retryAfterSeconds: outcome.retryAfterSeconds })
    if (outcome.kind !== 'owned') return publishDecision(scope, parsed.key, outcome)
    return publishDecision(scope, parsed.key, { kind: 'execute', execution: new Execution(outcome.claim, outcome.how, resolved) })
  }

  async function run(
    input: BeginInput,
    handler: (execution: Execution<Tx>) => Promise<StoredResponse>,
    runOptions: { onFailure?: FailurePolicy } & WaitOptions = {},
  ): Promise<RunResult<Tx>> {
    const decision = await begin(input, runOptions)
    if (decision.kind !== 'execute') return decision
    const { execution } = decision
    let response: StoredResponse
    try {
      response = await handler(execution)
    } catch (error) {
      if (execution.state !== 'running') throw error
      const policy = runOptions.onFailure ?? defaultFailurePolicy
      const action = policy(error, execution)
      if (action.action === 'store') {
        await execution.fail(action.response)
        return { kind: 'executed', response: action.response }
      }
      await (action.action === 'release' ? execution.release() : execution.suspend())
      throw error
    }
    if (execution.state === 'running') await execution.complete(response)
    return { kind: 'executed', response }
  }

  const inspect = async (input: InspectInput) => inspectOperation(resolved.store, scopeOf(input.scope), input.key, resolved.staleAfterMs)

  return Object.freeze({ options: resolved, begin, run, inspect })
}

/** Issue 23: a bad wait is the caller's bug, refused before the claim. */
function waitOf(wait: WaitOptions | undefined): number {
  const waitMs = wait?.waitMs ?? 0
  if (typeof waitMs !== 'number' || !Number.isFinite(waitMs) || waitMs < 0) throw invalid('waitMs', 'must be a finite number of milliseconds, 0 or more', waitMs)
  return waitMs
}

/** Issue 8, path 11: a scope is settled before the claim, never found wrong midway. */
function scopeOf(scope: unknown): string {
  if (typeof scope === 'number' && Number.isFinite(scope)) return String(scope)
  if (typeof scope === 'string' && scope.length > 0) return scope
  throw new OncelyError('ONCELY_INVALID_SCOPE', `the scope must be a non-empty string or a finite number; got ${typeof scope === 'string' ? 'an empty string' : typeof scope}`)
}
