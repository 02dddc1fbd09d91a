import { headerOf, type Received } from './http.js'

/** Whether the response says it is a replay (`Idempotent-Replayed: true`). */
export function isReplayed(received: Received): boolean {
  return headerOf(received, 'idempotent-replayed')?.trim().toLowerCase() === 'true'
}

export const isSuccess = (received: Received): boolean => received.status >= 200 && received.status < 300

/** A response in a few words: status, the replay mark, body size, Retry-After. */
export function describe(received: Received): string {
  const retryAfter = headerOf(received, 'retry-after')
  return [
    `${received.status}${isReplayed(received) ? ' replayed' : ''}`,
    `${received.body.length} bytes`,
    ...(retryAfter === undefined ? [] : [`Retry-After: ${retryAfter}`]),
  ].join(', ')
}

/** Why `replay` is not a verbatim replay of `first` (`what` names it in the reasons); none when it is. */
export function replayProblems(replay: Received, first: Received, what = 'the replay'): string[] {
  const problems: string[] = []
  if (!isReplayed(replay)) problems.push(`${what} has no Idempotent-Replayed: true`)
  if (replay.status !== first.status) problems.push(`${what} has status ${replay.status}, the first answer ${first.status}`)
  if (!replay.body.equals(first.body)) problems.push(`${what}'s body differs from the first answer's (${replay.body.length} bytes against ${first.body.length}${firstDifference(replay.body, first.body)})`)
  const [type, firstType] = [headerOf(replay, 'content-type'), headerOf(first, 'content-type')]
  if (type !== firstType) problems.push(`${what} has Content-Type ${String(type)}, the first answer ${String(firstType)}`)
  return problems
}

function firstDifference(a: Buffer, b: Buffer): string {
  const length = Math.min(a.length, b.length)
  for (let i = 0; i < length; i++) if (a[i] !== b[i]) return `, first different byte at offset ${i}`
  return ''
}

/** Counts of a group of answers: what executed, what was refused with 409, what was replayed. */
export function classify(answers: ReadonlyArray<Received | Error>): { executed: Received[]; conflicts: Received[]; replays: Received[]; errors: Error[] } {
  const sorted = { executed: [] as Received[], conflicts: [] as Received[], replays: [] as Received[], errors: [] as Error[] }
  for (const answer of answers) {
    if (answer instanceof Error) sorted.errors.push(answer)
    else if (answer.status === 409) sorted.conflicts.push(answer)
    else if (isReplayed(answer)) sorted.replays.push(answer)
    else sorted.executed.push(answer)
  }
  return sorted
}
