import type { StoredResponse } from '../engine/types.js'
import { problem, PROBLEM_TYPES } from './answers.js'

/**
 * The outcome recorded in place of a response that could not be stored (over
 * `maxStoredBodyBytes`): a 500 `…/result-unavailable` problem, replayed verbatim to every retry
 * of the key, so the operation is never run again (Invariant 7) and never pretends to a body it
 * no longer has. `result_status` is the status the first caller got; `instance` names the log
 * line written when the result was dropped.
 */
export function resultUnavailableResponse(resultStatus: number, reason: string, keyTtlSeconds: number | undefined): { response: StoredResponse; instance: string } {
  const answer = problem({
    status: 500,
    type: PROBLEM_TYPES.resultUnavailable,
    title: 'Result unavailable',
    detail: `this operation ran and ended with status ${resultStatus}, but its response cannot be replayed: ${reason}; it is not run again`,
    retryable: false,
    advice: { newKeySafe: false, state: resultStatus < 400 ? 'completed' : 'failed' },
    keyTtlSeconds,
    extra: { result_status: resultStatus },
  })
  return { response: { status: answer.status, headers: answer.headers, body: answer.body }, instance: answer.instance ?? '' }
}
