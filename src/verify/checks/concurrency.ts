import { judge, type Check } from '../check.js'
import { executionProblems, executionsText, type CheckContext } from '../context.js'
import { classify, describe, isSuccess, replayProblems } from '../received.js'

/**
 * `width` requests with one key at once on separate connections: exactly one runs, every other
 * is a 409 or the replay of that one, and a request after the burst gets the replay.
 */
async function duplicates(context: CheckContext, width: number) {
  const key = context.newKey()
  const expected = `one 2xx executed; the other ${width - 1} a 409 or its replay; a request after them the replay; 1 execution`
  const { value, executions } = await context.counted(key, async () => {
    const answers = await context.burst({ label: 'the template', key }, width)
    return { answers, after: await context.sendUntilSettled({ label: 'the template after the burst', key }) }
  })
  const { executed, conflicts, replays, errors } = classify(value.answers)
  const winner = executed[0]
  const problems: string[] = []
  if (executed.length !== 1) problems.push(`${executed.length} answers were not a 409 nor marked Idempotent-Replayed (${summarize(executed.map(describe))}): the endpoint ran more than once, or a replay lacks its mark`)
  if (winner !== undefined && !isSuccess(winner)) problems.push(`the executed answer is ${describe(winner)}, not a 2xx`)
  if (errors.length > 0) problems.push(`${errors.length} requests got no answer (${summarize(errors.map((error) => error.message))})`)
  if (winner !== undefined) {
    const bad = replays.map((one) => replayProblems(one, winner)).filter((list) => list.length > 0)
    if (bad.length > 0) problems.push(`${bad.length} replays differ from the executed answer (${bad[0]?.join(', ')})`)
    problems.push(...replayProblems(value.after.answer, winner, 'the request after the burst'))
  }
  problems.push(...executionProblems(executions, 1))
  const seen = `${executed.length} executed, ${conflicts.length} × 409, ${replays.length} replays, ${errors.length} without an answer; after: ${describe(value.after.answer)}; ${executionsText(executions)}`
  return judge(expected, seen, problems)
}

function summarize(items: readonly string[]): string {
  const counts = new Map<string, number>()
  for (const item of items) counts.set(item, (counts.get(item) ?? 0) + 1)
  return [...counts].map(([item, count]) => (count === 1 ? item : `${count} × ${item}`)).join('; ')
}

export const concurrentPair: Check = {
  id: 'concurrent-pair',
  title: 'two requests with one key at once: one execution',
  run: (context) => duplicates(context, 2),
}

export const concurrentBurst: Check = {
  id: 'concurrent-burst',
  title: 'a burst of requests with one key at once (--width): one execution',
  run: (context) => duplicates(context, context.options.width),
}
