import type { CheckId, CheckOutcome } from './check-result.js'
import type { CheckContext } from './context.js'

export interface Verdict {
  readonly outcome: CheckOutcome
  readonly reason: string
  readonly expected: string
  readonly seen: string
}

export interface Check {
  readonly id: CheckId
  readonly title: string
  run(context: CheckContext): Promise<Verdict>
}

export const pass = (expected: string, seen: string, reason = ''): Verdict => ({ outcome: 'pass', reason, expected, seen })
export const fail = (expected: string, seen: string, reason: string): Verdict => ({ outcome: 'fail', reason, expected, seen })
export const skip = (reason: string, expected = ''): Verdict => ({ outcome: 'skip', reason, expected, seen: '' })

/** Passes when `problems` is empty, else fails with them as the reason. */
export function judge(expected: string, seen: string, problems: readonly string[], note = ''): Verdict {
  return problems.length === 0 ? pass(expected, seen, note) : fail(expected, seen, problems.join('; '))
}
