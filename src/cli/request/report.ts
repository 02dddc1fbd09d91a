import { describeAttempt, redactUrl, type Attempt, type ClientResponse } from '../../client/index.js'

/** What `oncely request` writes to stderr: one line per attempt, and what the final answer was. */
export function logAttempt(attempt: Attempt, suffix: string): void {
  const key = attempt.key === undefined ? '' : ` (Idempotency-Key ${attempt.key})`
  process.stderr.write(`oncely request: ${describeForShell(attempt)}${key}${suffix}\n`)
}

/** `describeAttempt`, with a hint where the transport's code alone leaves a newcomer guessing. */
function describeForShell(attempt: Attempt): string {
  const line = describeAttempt(attempt)
  if (attempt.networkFailure !== 'ENOTFOUND' && attempt.networkFailure !== 'EAI_AGAIN') return line
  const host = /(?:ENOTFOUND|EAI_AGAIN) (\S+)/.exec(String(attempt.error?.cause instanceof Error ? attempt.error.cause.message : ''))?.[1]
  return `${line}: could not resolve the host${host ? ` '${host}'` : ''}, check the URL`
}

/** Says whether the answer is a replay, why a 3xx was not followed, and a key store that failed. */
export function explainResponse(response: ClientResponse, url: URL): void {
  if (response.finishError) {
    const cause = response.finishError.cause instanceof Error ? `: ${response.finishError.cause.message}` : ''
    process.stderr.write(`oncely request: ${oneLine(response.finishError.message.replace(/^oncely client: /, ''))}${oneLine(cause)}\n`)
  }
  if (response.replayed) {
    process.stderr.write('oncely request: a replay: the server answered with the stored response to an earlier request with this key; nothing ran again\n')
  }
  if (response.status >= 300 && response.status <= 399) {
    const location = response.headers.get('location')
    const target = location === null ? '' : ` to ${redactUrl(new URL(location, url))}`
    process.stderr.write(
      `oncely request: ${response.status} is a redirect${target}; it is not followed (a 303 would resend the key with a GET, a 307 would send it and your headers elsewhere): send the request there yourself, as a new --operation\n`,
    )
  }
}

function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ')
}
