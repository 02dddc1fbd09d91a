import { channel } from 'node:diagnostics_channel'
import type { OncelyErrorCode } from '../errors.js'
import type { ClaimKind, ExecutionState } from './types.js'

/**
 * The engine's events, each on its own `node:diagnostics_channel` channel (`oncely:<event>`),
 * for users with their own telemetry. The engine, the sweeper, the reconciler and `releaseKey`
 * publish them; a channel with no subscriber costs nothing (nothing is even built).
 */
export const ENGINE_EVENTS = ['claimed', 'taken-over', 'replayed', 'conflict', 'mismatch', 'invalid', 'lock-lost', 'completed', 'failed', 'released', 'suspended', 'swept', 'reconciled'] as const
export type EngineEventName = (typeof ENGINE_EVENTS)[number]

/** What every event carries; `key` is the raw key, for in-process subscribers only: hash it before you log it. */
export interface EngineEvent {
  event: EngineEventName
  scope?: string
  key?: string
  claimId?: string
  recoveryPoint?: string | null
  [detail: string]: unknown
}

/** The channel name of an event: `oncely:claimed`, `oncely:lock-lost`, … */
export function engineChannelName(event: EngineEventName): string {
  return `oncely:${event}`
}

const channels = new Map(ENGINE_EVENTS.map((event) => [event, channel(engineChannelName(event))]))

/**
 * Publishes one event, only when someone listens.
 *
 * @example
 * ```ts
 * import { publishEngineEvent } from 'oncely'
 * publishEngineEvent({ event: 'swept', deleted: 0, batches: 1 })
 * ```
 */
export function publishEngineEvent(event: EngineEvent): void {
  const target = channels.get(event.event)
  if (target?.hasSubscribers) target.publish(event)
}

/** Publishes the event `build` makes, and builds it only when someone listens to `name`. */
function publishBuilt(name: EngineEventName, build: () => EngineEvent): void {
  const target = channels.get(name)!
  if (target.hasSubscribers) target.publish(build())
}

const DECISION_EVENTS = { replay: 'replayed', conflict: 'conflict', mismatch: 'mismatch', invalid: 'invalid' } as const

/** What an event reads of the engine's `Decision`, named by shape so this module imports no engine. */
type DecisionShape =
  | { kind: 'execute'; execution: { key: string; claimId: string; recoveryPoint: string | null; how: ClaimKind } }
  | { kind: keyof typeof DECISION_EVENTS }

/** Publishes what `begin` decided (`claimed`, `taken-over`, `replayed`, …) and returns the decision. */
export function publishDecision<D extends DecisionShape>(scope: string, key: unknown, decided: D): D {
  const decision: DecisionShape = decided
  if (decision.kind === 'execute') {
    const { execution } = decision
    const event = execution.how === 'take-over' ? 'taken-over' : 'claimed'
    publishBuilt(event, () => ({ event, scope, key: execution.key, claimId: execution.claimId, recoveryPoint: execution.recoveryPoint, how: execution.how }))
  } else {
    const event = DECISION_EVENTS[decision.kind]
    publishBuilt(event, () => ({ event, scope, ...(typeof key === 'string' ? { key } : {}) }))
  }
  return decided
}

const END_EVENTS = { completed: 'completed', failed: 'failed', released: 'released', suspended: 'suspended', lost: 'lock-lost' } as const

/**
 * Publishes how an execution ended; `lock-lost` carries the `code` that says why this worker may
 * no longer write (taken over, the database away past the lease, the handler past its deadline).
 */
export function publishEnded(
  execution: { scope: string; key: string; claimId: string; how: ClaimKind; recoveryPoint: string | null },
  state: ExecutionState,
  lostCode: OncelyErrorCode,
): void {
  if (state === 'running') return
  const event = END_EVENTS[state]
  publishBuilt(event, () => {
    const { scope, key, claimId, how, recoveryPoint } = execution
    return { event, scope, key, claimId, how, recoveryPoint, ...(state === 'lost' ? { code: lostCode } : {}) }
  })
}
