import type { BeginInput, Decision, Engine, FailurePolicy, RunResult } from '../engine/engine.js'
import type { EngineEventName } from '../engine/events.js'
import type { Execution } from '../engine/execution.js'
import type { InspectInput } from '../engine/inspect.js'
import type { StoredResponse } from '../engine/types.js'
import type { WaitOptions } from '../engine/wait.js'
import { isOncelyError } from '../errors.js'

/** The subset of an OpenTelemetry `Span` oncely uses (`@opentelemetry/api`, an optional peer). */
export interface SpanLike {
  setAttribute(name: string, value: string | number | boolean): unknown
  setStatus(status: { code: number; message?: string }): unknown
  end(): void
}

/** The subset of an OpenTelemetry `Tracer` oncely uses: pass `trace.getTracer('oncely')`. */
export interface TracerLike {
  startSpan(name: string, options?: { attributes?: Record<string, string | number | boolean> }): SpanLike
}

/** OpenTelemetry's `SpanStatusCode.ERROR`, without importing the API. */
const SPAN_ERROR = 2

/**
 * Wraps an engine so that every request is an OpenTelemetry span `oncely.request` (attributes
 * `idempotency.outcome`, `idempotency.recovery_point`, `idempotency.claim`). The wrapped engine
 * is used exactly like the original (pass it to the adapters); without a tracer it is the
 * engine itself. The events on `node:diagnostics_channel` need no wrapper: the engine publishes
 * them. Nothing is imported from `@opentelemetry/api`: the tracer you pass is the only link.
 *
 * @example
 * ```ts
 * import { trace } from '@opentelemetry/api'
 * import { instrumentEngine } from 'oncely/ops'
 * const traced = instrumentEngine(engine, { tracer: trace.getTracer('oncely') })
 * ```
 */
export function instrumentEngine<Tx>(engine: Engine<Tx>, options: { tracer?: TracerLike } = {}): Engine<Tx> {
  const { tracer } = options
  if (tracer === undefined) return engine

  const started = (input: BeginInput) => tracer.startSpan('oncely.request', { attributes: { 'idempotency.scope': String(input.scope) } })

  function answered(decision: Exclude<Decision<Tx>, { kind: 'execute' }>, span: SpanLike): void {
    const outcome = decision.kind === 'replay' ? 'replayed' : decision.kind
    span.setAttribute('idempotency.outcome', outcome)
    span.end()
  }

  function owned(execution: Execution<Tx>, span: SpanLike): void {
    span.setAttribute('idempotency.claim', execution.how)
    let ended = false
    const end = (event: EngineEventName, error?: unknown) => {
      // One outcome per execution: release() may suspend through the wrapped suspend().
      if (ended) return
      ended = true
      span.setAttribute('idempotency.outcome', event === 'completed' ? 'created' : event)
      span.setAttribute('idempotency.recovery_point', execution.recoveryPoint ?? '')
      if (error !== undefined) span.setStatus({ code: SPAN_ERROR, message: error instanceof Error ? error.message : 'the execution failed' })
      span.end()
    }
    // Each way an execution ends, wrapped on this instance: the class stays the engine's.
    const settledEvent = (): EngineEventName => (execution.state === 'completed' ? 'completed' : execution.state === 'failed' ? 'failed' : execution.state === 'suspended' ? 'suspended' : 'released')
    const watch = async <R>(ending: Promise<R>): Promise<R> => {
      try {
        const result = await ending
        end(settledEvent())
        return result
      } catch (error) {
        end(isOncelyError(error, 'ONCELY_LOCK_LOST') ? 'lock-lost' : execution.state === 'suspended' ? 'suspended' : 'failed', error)
        throw error
      }
    }
    const complete = execution.complete.bind(execution)
    const fail = execution.fail.bind(execution)
    const completeInTransaction = execution.completeInTransaction.bind(execution)
    const release = execution.release.bind(execution)
    const suspend = execution.suspend.bind(execution)
    execution.complete = (response, settle) => watch(complete(response, settle))
    execution.fail = (response, settle) => watch(fail(response, settle))
    execution.completeInTransaction = (work) => watch(completeInTransaction(work))
    execution.release = () => watch(release())
    execution.suspend = () => watch(suspend())
  }

  async function begin(input: BeginInput, wait?: WaitOptions): Promise<Decision<Tx>> {
    const span = started(input)
    const decision = await engine.begin(input, wait)
    if (decision.kind === 'execute') owned(decision.execution, span)
    else answered(decision, span)
    return decision
  }

  async function run(input: BeginInput, handler: (execution: Execution<Tx>) => Promise<StoredResponse>, runOptions?: { onFailure?: FailurePolicy } & WaitOptions): Promise<RunResult<Tx>> {
    const span = started(input)
    const result = await engine.run(
      input,
      (execution) => {
        owned(execution, span)
        return handler(execution)
      },
      runOptions,
    )
    if (result.kind !== 'executed') answered(result, span)
    return result
  }

  // A read for support tools, not a request: no span.
  return Object.freeze({ options: engine.options, begin, run, inspect: (input: InspectInput) => engine.inspect(input) })
}
