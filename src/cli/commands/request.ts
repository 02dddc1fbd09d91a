import { parseArgs } from 'node:util'
import { ClientAbortedError, ClientGaveUpError, ClientRequestFailedError, createClient, fileKeyStore, type ClientResponse } from '../../client/index.js'
import { DEFAULT_DEADLINE_MS } from '../../client/options.js'
import { isOncelyError } from '../../errors.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { defaultKeyStoreDirectory } from '../request/default-key-store.js'
import { explainResponse, logAttempt } from '../request/report.js'
import { parseTargetUrl } from '../request/target-url.js'

/** Exit codes of `oncely request` (also in its help and in docs/client.md). */
export const REQUEST_EXIT = {
  /** The final response is 2xx. */
  ok: EXIT.ok,
  /** Any other failure: the key store failed, a final 1xx/3xx (never followed), a fault that is not a network failure. */
  failure: EXIT.failure,
  usage: EXIT.usage,
  /** Gave up with no final answer: network errors, timeouts, or a last 408/409/425/429. */
  gaveUp: 3,
  /** A final 4xx, not retried (400, 401, 404, 422…). */
  clientError: 4,
  /** Gave up on a server error: the last attempt answered 5xx. */
  serverError: 5,
  /** The operation was first used for a different request; nothing was sent. */
  operationMismatch: 6,
  /** Interrupted with Ctrl-C (SIGINT). */
  interrupted: 130,
} as const

function help(): string {
  return `usage: oncely request METHOD URL [flags]

Sends one HTTP request, like curl, with safe retries: POST and PATCH carry an
Idempotency-Key, minted once per --operation and kept in a key store before the
first attempt, so every attempt, and a rerun after a crash, sends the same key.
GET, HEAD, PUT and DELETE are retried without a key. Retries on network failures
(refused, reset or cut connections, DNS, socket timeouts), attempt timeouts,
5xx, 408, 409, 425 and 429 (after Retry-After); never on another 4xx. A 3xx is
returned, never followed.

The final response body goes to stdout; one line per attempt goes to stderr,
and a line saying so when the answer is a replay of a stored response.

flags:
  --operation ID            name of the logical operation (such as order-42:charge);
                            without it the key lives only as long as this run
  --data BODY               request body, sent exactly as typed: as application/json
                            when it is valid JSON (unless --header sets a content
                            type), else as text/plain
  --header 'NAME: VALUE'    a request header; repeatable
  --key-store DIR           directory of the file key store, one per user
                            (default: ${defaultKeyStoreDirectory()},
                            from $XDG_STATE_HOME, else ~/.local/state)
  --max-attempts N          attempts, the first included (default: no limit)
  --deadline-ms N           time for the whole call, key store and waits included
                            (default: ${DEFAULT_DEADLINE_MS}: outlasts a crash recovery on the server)
  --attempt-timeout-ms N    time for one attempt (default: 30000)
  --base-delay-ms N         first backoff ceiling, doubled per retry (default: 100)
  --max-retry-after-ms N    longest Retry-After honoured (default: 60000)

exit codes:
  0    the final response is 2xx
  1    another failure: the key store failed, a final 1xx or 3xx (redirects are
       not followed), a fault that is not a network failure (not retried)
  2    bad usage
  3    gave up: attempts or deadline used up on network failures, timeouts,
       or a last 408, 409, 425 or 429
  4    the final response is a 4xx that is not retried (400, 401, 404, 422...)
  5    gave up on a server error: the last attempt answered 5xx
  6    the operation was first used for a different request; nothing was sent
  130  interrupted (SIGINT); the key stays, rerun with the same --operation

Header values and query values are never printed.

example:
  oncely request POST http://127.0.0.1:3000/v1/charges --operation order-42:charge \\
    --data '{"amount":1000,"currency":"usd","customer":"cus_42"}' \\
    --header 'authorization: Bearer demo_42'
`
}

export const command: Command = {
  name: 'request',
  summary: 'send a request with a persisted key and safe retries',
  get help() {
    return help()
  },
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        operation: { type: 'string' },
        data: { type: 'string' },
        header: { type: 'string', multiple: true },
        'key-store': { type: 'string' },
        'max-attempts': { type: 'string' },
        'deadline-ms': { type: 'string' },
        'attempt-timeout-ms': { type: 'string' },
        'base-delay-ms': { type: 'string' },
        'max-retry-after-ms': { type: 'string' },
      },
    })
    const [method, target, ...extra] = positionals
    if (method === undefined || target === undefined) throw new UsageError('METHOD and URL are required')
    if (extra.length > 0) throw new UsageError(`unexpected argument '${extra[0]}'`)
    const url = parseTargetUrl(target)
    const headers = parseHeaders(values.header ?? [])

    const controller = new AbortController()
    const onSigint = (): void => controller.abort(new Error('interrupted'))
    process.once('SIGINT', onSigint)
    try {
      const client = await usageOnInvalid(() =>
        createClient({
          baseUrl: url.origin,
          keyStore: fileKeyStore(values['key-store'] ?? defaultKeyStoreDirectory()),
          headers,
          ...numberFlag('maxAttempts', '--max-attempts', values['max-attempts']),
          ...numberFlag('deadlineMs', '--deadline-ms', values['deadline-ms']),
          ...numberFlag('attemptTimeoutMs', '--attempt-timeout-ms', values['attempt-timeout-ms']),
          ...numberFlag('baseDelayMs', '--base-delay-ms', values['base-delay-ms']),
          ...numberFlag('maxRetryAfterMs', '--max-retry-after-ms', values['max-retry-after-ms']),
          onRetry: ({ attempt, delayMs }) => logAttempt(attempt, `; retrying in ${Math.round(delayMs)} ms`),
        }),
      )
      const body = values.data === undefined ? {} : { body: values.data, headers: dataContentType(values.data, headers) }
      const operation = values.operation === undefined ? {} : { operationId: values.operation }
      const response = await usageOnInvalid(() => client.request(method, url.pathname + url.search, { ...body, ...operation, signal: controller.signal }))
      const last = response.attempts.at(-1)
      if (last) logAttempt(last, '')
      explainResponse(response, url)
      writeBody(response)
      if (operation.operationId !== undefined) await pruneQuietly(() => client.prune())
      if (response.ok) return REQUEST_EXIT.ok
      if (response.status >= 400 && response.status <= 499) return REQUEST_EXIT.clientError
      return REQUEST_EXIT.failure
    } catch (error) {
      if (error instanceof ClientGaveUpError) {
        const last = error.attempts.at(-1)
        if (last) logAttempt(last, '')
        process.stderr.write(`oncely request: ${plain(error.message)}\n`)
        if (error.response) writeBody(error.response)
        return last?.status !== undefined && last.status >= 500 ? REQUEST_EXIT.serverError : REQUEST_EXIT.gaveUp
      }
      if (error instanceof ClientAbortedError) {
        process.stderr.write(`oncely request: ${plain(error.message)}\n`)
        return REQUEST_EXIT.interrupted
      }
      if (isOncelyError(error, 'ONCELY_CLIENT_OPERATION_MISMATCH')) {
        process.stderr.write(`oncely request: ${plain(error.message)}\n`)
        return REQUEST_EXIT.operationMismatch
      }
      if (error instanceof ClientRequestFailedError) {
        process.stderr.write(`oncely request: ${plain(error.message)}\n`)
        return REQUEST_EXIT.failure
      }
      if (isOncelyError(error, 'ONCELY_KEY_STORE_FAILED')) {
        const cause = error.cause instanceof Error ? `: ${error.cause.message}` : ''
        process.stderr.write(`oncely request: ${plain(error.message)}${cause}\n`)
        return REQUEST_EXIT.failure
      }
      if (error instanceof UsageError) throw error
      // Anything else is reported in one line, not a stack: its message may be all the user needs.
      process.stderr.write(`oncely request: ${error instanceof Error ? plain(error.message) : String(error)}\n`)
      return REQUEST_EXIT.failure
    } finally {
      process.removeListener('SIGINT', onSigint)
    }
  },
}

/** An invalid option or argument is bad usage here, not a fault. */
async function usageOnInvalid<T>(make: () => T | Promise<T>): Promise<T> {
  try {
    return await make()
  } catch (error) {
    if (isOncelyError(error, 'ONCELY_INVALID_OPTION')) throw new UsageError(plain(error.message))
    throw error
  }
}

function writeBody(response: ClientResponse): void {
  process.stdout.write(response.body)
  if (response.body.length > 0 && response.body.at(-1) !== 0x0a && process.stdout.isTTY) process.stdout.write('\n')
}

async function pruneQuietly(prune: () => Promise<number>): Promise<void> {
  try {
    await prune()
  } catch (error) {
    process.stderr.write(`oncely request: could not prune the key store: ${error instanceof Error ? error.message : String(error)}\n`)
  }
}

function parseHeaders(lines: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = {}
  for (const [index, line] of lines.entries()) {
    const colon = line.indexOf(':')
    // Never echo the line: a mistyped `Authorization Bearer …` holds the secret.
    if (colon <= 0) throw new UsageError(`--header number ${index + 1} must look like 'NAME: VALUE' (it is not shown: it may hold a secret)`)
    headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim()
  }
  return headers
}

/**
 * `--data` is sent byte for byte as typed; valid JSON goes as `application/json` (the client
 * then fingerprints its canonical parse), unless a --header names the content type.
 */
function dataContentType(data: string, headers: Record<string, string>): Record<string, string> {
  if (Object.keys(headers).some((name) => name.toLowerCase() === 'content-type')) return {}
  try {
    JSON.parse(data)
  } catch {
    return {}
  }
  return { 'content-type': 'application/json' }
}

function numberFlag<K extends string>(option: K, flag: string, value: string | undefined): { [P in K]?: number } {
  if (value === undefined) return {}
  if (!/^\d+$/.test(value)) throw new UsageError(`${flag} must be a whole number, got '${value}'`)
  return { [option]: Number(value) } as { [P in K]?: number }
}

/** The command names itself; the client's own prefix would say it twice. */
function plain(message: string): string {
  return message.replace(/^oncely client: /, '')
}
