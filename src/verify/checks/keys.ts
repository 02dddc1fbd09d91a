import { judge, type Check } from '../check.js'
import { executionProblems, executionsText, type CheckContext, type RequestSpec } from '../context.js'
import { describe } from '../received.js'

/** Each request must be refused with 400 and run nothing. */
async function refusedAll(context: CheckContext, specs: readonly RequestSpec[]) {
  const expected = `400 to each, nothing executed`
  const { value: answers, executions } = await context.counted(undefined, async () => {
    const answers = []
    for (const spec of specs) answers.push(await context.send(spec))
    return answers
  })
  const problems = answers.flatMap((answer, i) => (answer.status === 400 ? [] : [`${specs[i]?.label} answered ${describe(answer)}, not 400`]))
  problems.push(...executionProblems(executions, 0))
  const counted = executions === undefined && context.options.probe !== undefined ? 'executions not counted (the probe counts per key)' : executionsText(executions)
  return judge(expected, `${answers.map((answer, i) => `${specs[i]?.label}: ${describe(answer)}`).join('; ')}; ${counted}`, problems)
}

export const missingKey: Check = {
  id: 'missing-key',
  title: 'a request without Idempotency-Key is refused with 400',
  run: (context) => refusedAll(context, [{ label: 'the template', key: null }]),
}

export const malformedKey: Check = {
  id: 'malformed-key',
  title: 'a malformed Idempotency-Key is refused with 400',
  run: (context) =>
    refusedAll(context, [
      { label: 'the template with an empty key', key: '' },
      // Not a structured-field string (RFC 8941): a quote inside the quotes.
      { label: 'the template with a broken quoted key', key: '"a"b"' },
      // Sent as the byte 0xE9: outside the printable ASCII a structured-field string allows.
      { label: 'the template with a non-ASCII key', key: `${context.newKey()}-\u00e9` },
    ]),
}

export const duplicateKey: Check = {
  id: 'duplicate-key',
  title: 'two Idempotency-Key header lines are refused with 400',
  run: (context) => refusedAll(context, [{ label: 'the template with two different keys', key: [context.newKey(), context.newKey()] }]),
}
