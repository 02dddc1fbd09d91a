import { changedPayload, reorderedJson } from '../body-variants.js'
import { fail, judge, skip, type Check } from '../check.js'
import { executionProblems, executionsText } from '../context.js'
import { describe, isReplayed, isSuccess, replayProblems } from '../received.js'

const SUCCESS_FIRST = 'the first answer a 2xx without Idempotent-Replayed'

export const replay: Check = {
  id: 'replay',
  title: 'a repeat is replayed byte for byte, marked Idempotent-Replayed',
  async run(context) {
    const key = context.newKey()
    const expected = `${SUCCESS_FIRST}; the repeat the same status, body bytes and Content-Type with Idempotent-Replayed: true; 1 execution`
    const { value: [first, again], executions } = await context.counted(key, async () => {
      const first = await context.send({ label: 'the template', key })
      if (!isSuccess(first)) return [first, undefined] as const
      return [first, await context.send({ label: 'the template again', key })] as const
    })
    if (again === undefined) return fail(expected, describe(first), `the template request answered ${first.status}, not a 2xx: fix the URL, --data or --header (nothing else can be judged)`)
    const problems = [...(isReplayed(first) ? ['the first answer says it is a replay'] : []), ...replayProblems(again, first, 'the repeat'), ...executionProblems(executions, 1)]
    return judge(expected, `first ${describe(first)}; repeat ${describe(again)}; ${executionsText(executions)}`, problems)
  },
}

export const payloadMismatch: Check = {
  id: 'payload-mismatch',
  title: 'the same key with a different payload is refused with 422',
  async run(context) {
    const changed = context.options.changedBody ?? (context.options.body && changedPayload(context.options.body))
    if (!changed) return skip('needs a JSON body to change (--data), or --changed-data')
    const key = context.newKey()
    const expected = `${SUCCESS_FIRST}; the changed payload 422, not run; the template again still the replay; 1 execution`
    const { value: answers, executions } = await context.counted(key, async () => {
      const first = await context.send({ label: 'the template', key })
      const other = await context.send({ label: 'a changed payload', key, body: changed })
      return { first, other, again: await context.send({ label: 'the template again', key }) }
    })
    const { first, other, again } = answers
    const problems = [
      ...(isSuccess(first) && !isReplayed(first) ? [] : [`the first answer is ${describe(first)}`]),
      ...(other.status === 422 ? [] : [`the changed payload answered ${describe(other)}, not 422`]),
      ...replayProblems(again, first, 'the template sent again'),
      ...executionProblems(executions, 1),
    ]
    return judge(expected, `first ${describe(first)}; changed ${describe(other)}; again ${describe(again)}; ${executionsText(executions)}`, problems)
  },
}

export const reorderedJsonCheck: Check = {
  id: 'reordered-json',
  title: 'the same JSON written differently (member order, whitespace) is replayed',
  async run(context) {
    const reordered = context.options.body && reorderedJson(context.options.body)
    if (!reordered) return skip('needs a JSON object or array body (--data)')
    const key = context.newKey()
    const expected = `${SUCCESS_FIRST}; the reordered body the replay; 1 execution`
    const { value: [first, second], executions } = await context.counted(key, async () => {
      const first = await context.send({ label: 'the template', key })
      return [first, await context.send({ label: 'the template with its members reversed and indented', key, body: reordered })] as const
    })
    const problems = [...(isSuccess(first) && !isReplayed(first) ? [] : [`the first answer is ${describe(first)}`]), ...replayProblems(second, first, 'the reordered request'), ...executionProblems(executions, 1)]
    return judge(expected, `first ${describe(first)}; reordered ${describe(second)}; ${executionsText(executions)}`, problems)
  },
}
