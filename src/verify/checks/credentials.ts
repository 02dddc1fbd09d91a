import { judge, skip, type Check } from '../check.js'
import { executionProblems, executionsText } from '../context.js'
import { describe, isReplayed, isSuccess, replayProblems } from '../received.js'

/** The template's headers with the second credential's put in place of those of the same name. */
function withOtherCredential(headers: ReadonlyArray<readonly [string, string]>, other: ReadonlyArray<readonly [string, string]>) {
  const replaced = new Set(other.map(([name]) => name.toLowerCase()))
  return [...headers.filter(([name]) => !replaced.has(name.toLowerCase())), ...other]
}

export const credentialsIsolated: Check = {
  id: 'credentials-isolated',
  title: 'two credentials sending one key are two operations: neither sees the other\'s response',
  async run(context) {
    const other = context.options.otherHeaders
    if (other === undefined) return skip('needs a second credential (--other-header)')
    const otherHeaders = withOtherCredential(context.options.headers, other)
    const key = context.newKey()
    const expected = 'each credential\'s first answer a 2xx executed (not a replay, not a 409 or 422), each replayed only to its own credential; 2 executions'
    const { value, executions } = await context.counted(key, async () => {
      const a = await context.send({ label: 'the template, first credential', key })
      const b = await context.send({ label: 'the template, second credential', key, headers: otherHeaders })
      const againA = await context.send({ label: 'the template again, first credential', key })
      const againB = await context.send({ label: 'the template again, second credential', key, headers: otherHeaders })
      return { a, b, againA, againB }
    })
    const { a, b, againA, againB } = value
    const problems = [
      ...(isSuccess(a) && !isReplayed(a) ? [] : [`the first credential's answer is ${describe(a)}`]),
      ...(isSuccess(b) && !isReplayed(b) ? [] : [`the second credential's answer is ${describe(b)}: it ${isReplayed(b) ? 'was given the first credential\'s stored response' : 'did not run as an operation of its own'}`]),
      ...replayProblems(againA, a, 'the first credential\'s repeat'),
      ...replayProblems(againB, b, 'the second credential\'s repeat'),
      ...executionProblems(executions, 2),
    ]
    const note = a.body.equals(b.body) ? 'the two first answers have the same bytes, so only the replay marks and the probe tell them apart' : ''
    return judge(expected, `first ${describe(a)}; second ${describe(b)}; repeats ${describe(againA)} and ${describe(againB)}; ${executionsText(executions)}`, problems, note)
  },
}
