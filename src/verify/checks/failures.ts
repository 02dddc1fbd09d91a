import { fail, judge, skip, type Check } from '../check.js'
import { executionsText } from '../context.js'
import { describe, isReplayed } from '../received.js'

export const serverErrorNotStored: Check = {
  id: 'server-error-not-stored',
  title: 'a 5xx is not stored: a retry with the same key runs again',
  async run(context) {
    const failBody = context.options.failBody
    if (failBody === undefined) return skip('needs a body the endpoint answers with a 5xx (--fail-data)')
    const key = context.newKey()
    const expected = 'the failing request a 5xx; its retry not a replay (it runs again, whatever it answers)'
    const first = await context.send({ label: 'the failing body', key, body: failBody })
    if (first.status < 500 || first.status > 599) return fail(expected, describe(first), `the --fail-data request answered ${first.status}, not a 5xx, so nothing could be judged`)
    const { value: retry, executions } = await context.counted(key, () => context.send({ label: 'the failing body again', key, body: failBody }))
    const problems: string[] = []
    if (isReplayed(retry)) problems.push('the retry is marked Idempotent-Replayed: the 5xx was stored')
    else if (retry.status === first.status && retry.body.equals(first.body) && executions === 0) problems.push('the retry repeats the 5xx byte for byte and the probe counted no execution: the 5xx was stored and replayed without the mark')
    return judge(expected, `first ${describe(first)}; retry ${describe(retry)}; ${executionsText(executions)} for the retry`, problems)
  },
}
