import type { StrategyName } from '../../reference-service/config.js'

/**
 * `concurrent`: two requests with one key sent together. `crash`: one request whose API process
 * SIGKILLs itself between the provider's answer and the commit, then, after a restart on the same
 * database, retries of the same key and payload until one gets a final answer.
 */
export type ScenarioKind = 'concurrent' | 'crash'

/** What the article measured for a scenario. */
export interface Expected {
  /** The two statuses, in ascending order (`concurrent` only). */
  statuses?: readonly number[]
  /** The status the retries end with (`crash` only): 409s before it, if any, are expected. */
  finalStatus?: number
  /** Charges the fake provider made. */
  charges: number
}

export interface Scenario {
  readonly strategy: StrategyName
  readonly kind: ScenarioKind
  /** How the row reads in the table. */
  readonly description: string
  readonly expected: Expected
}

/** The rows of the article's table, in its order. */
export const SCENARIOS: readonly Scenario[] = [
  {
    strategy: 'select-for-update',
    kind: 'concurrent',
    description: 'two concurrent requests, one key',
    expected: { statuses: [201, 500], charges: 1 },
  },
  {
    strategy: 'atomic-phases',
    kind: 'concurrent',
    description: 'two concurrent requests, one key',
    expected: { statuses: [201, 409], charges: 1 },
  },
  {
    strategy: 'claim-in-transaction',
    kind: 'crash',
    description: 'crash between provider call and commit, then a retry',
    expected: { finalStatus: 201, charges: 2 },
  },
  {
    strategy: 'atomic-phases',
    kind: 'crash',
    description: 'crash between provider call and commit, then a retry',
    expected: { finalStatus: 201, charges: 1 },
  },
]
