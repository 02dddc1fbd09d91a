import { fail, judge, skip, type Check } from '../check.js'
import { executionsText } from '../context.js'
import { describe, isReplayed } from '../received.js'

const MAX_SANE_SECONDS = 3600

/** Why a Retry-After value is not a usable wait (RFC 9110: delay-seconds or an HTTP-date), or undefined. */
export function retryAfterProblem(value: string | undefined, now = Date.now()): string | undefined {
  if (value === undefined) return 'no Retry-After'
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) <= MAX_SANE_SECONDS ? undefined : `Retry-After ${text} s is over an hour`
  const date = Date.parse(text)
  if (!/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(text) || Number.isNaN(date)) return `Retry-After ${JSON.stringify(text)} is neither seconds nor an HTTP-date`
  return date - now <= MAX_SANE_SECONDS * 1000 ? undefined : `Retry-After ${text} is over an hour away`
}

export const retryAfter: Check = {
  id: 'retry-after',
  title: 'every 409 carries a sane Retry-After (seconds or an HTTP-date, at most an hour)',
  async run(context) {
    const seen = context.state.conflicts
    if (seen.length === 0) return skip('no 409 was seen in the earlier checks: every duplicate was answered after the first finished')
    const problems = [...new Set(seen.flatMap(({ check, retryAfter }) => {
      const problem = retryAfterProblem(retryAfter)
      return problem === undefined ? [] : [`${check}: ${problem}`]
    }))]
    const values = [...new Set(seen.map(({ retryAfter }) => retryAfter ?? 'none'))]
    return judge('Retry-After on every 409, seconds (0 to 3600) or an HTTP-date within the hour', `${seen.length} × 409 with Retry-After ${values.join(', ')}`, problems)
  },
}

export const ttl: Check = {
  id: 'ttl',
  title: 'a key is forgotten after its TTL (--ttl-ms): the same key runs again',
  async run(context) {
    const ttlMs = context.options.ttlMs
    if (ttlMs === undefined) return skip('needs the endpoint\'s TTL (--ttl-ms); it waits that long')
    const key = context.newKey()
    const expected = `a 2xx; after ${ttlMs} ms and a margin the same request runs again: not a replay; 1 execution then`
    const first = await context.send({ label: 'the template', key })
    if (isReplayed(first) || first.status < 200 || first.status > 299) return fail(expected, describe(first), `the first answer is ${describe(first)}`)
    // A margin past the TTL: an expiry checked against the database clock, a sweeper's batch.
    await new Promise((resolve) => setTimeout(resolve, ttlMs + Math.max(1000, Math.ceil(ttlMs / 10))))
    const { value: later, executions } = await context.counted(key, () => context.send({ label: 'the template after the TTL', key }))
    const problems = [
      ...(isReplayed(later) ? ['the request after the TTL is a replay: the key was not forgotten'] : []),
      ...(executions === undefined || executions === 1 ? [] : [`the probe counted ${executions} executions after the TTL, not 1`]),
    ]
    return judge(expected, `first ${describe(first)}; after the TTL ${describe(later)}; ${executionsText(executions)}`, problems)
  },
}
