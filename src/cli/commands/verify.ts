import { writeFile } from 'node:fs/promises'
import { parseArgs } from 'node:util'
import { isOncelyError } from '../../errors.js'
import { CHECK_IDS, formatJUnit, formatTable, runConformance, type VerifyOptions } from '../../verify/index.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { bodyText, readTemplate } from '../verify/template-file.js'

const help = `usage: oncely verify URL [flags]

Runs the conformance checks against an endpoint that claims Idempotency-Key support:
concurrent duplicates, verbatim replay, 422 on a changed payload, 400 on missing,
malformed and repeated keys, two credentials with one key, a connection cut mid-flight
then retried, 5xx not stored, Retry-After, and the TTL. Each check passes, fails, or is
skipped with the reason when it needs something not given.

It sends real requests that run real operations: run it against staging, never
production. Details: docs/verify.md.

flags:
  --data BODY               the request body the endpoint accepts and runs (default: none)
  --header 'NAME: VALUE'    a header of every request (authentication...); repeatable
  --other-header 'N: V'     a header of a second credential, replacing the one of the
                            same name; repeatable; enables credentials-isolated
  --method METHOD           (default: POST)
  --probe URL               answers the number of executions so far (a JSON number,
                            {"count":N}, an array or {"data":[...]}); {key} in it is
                            replaced by the key; enables the execution counts
  --fail-data BODY          a body the endpoint answers with a 5xx; enables
                            server-error-not-stored
  --changed-data BODY       a body that differs in meaning (default: --data with its
                            first number plus one, else its first string changed)
  --ttl-ms N                the endpoint's key TTL; enables ttl, which waits that long
  --width N                 requests in the burst (default: 50)
  --timeout-ms N            time for one request (default: 10000)
  --template FILE           a JSON file with url, method, body, headers, otherHeaders,
                            probe, failBody, changedBody, ttlMs, width; flags win
  --only IDS                comma-separated check ids to run (default: all):
                            ${CHECK_IDS.join(', ')}
  --json                    print the report as JSON instead of the table
  --junit FILE              also write the report as JUnit XML to FILE

Header values are never printed.

exit codes:
  0  every check passed (skips allowed)
  1  a check failed
  2  bad usage

example:
  oncely verify http://127.0.0.1:3000/v1/charges \\
    --data '{"amount":1000,"currency":"usd","customer":"cus_42"}' \\
    --header 'authorization: Bearer demo_42' --other-header 'authorization: Bearer demo_43'
`

export const command: Command = {
  name: 'verify',
  summary: 'run the conformance checks against an Idempotency-Key endpoint',
  help,
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        data: { type: 'string' },
        header: { type: 'string', multiple: true },
        'other-header': { type: 'string', multiple: true },
        method: { type: 'string' },
        probe: { type: 'string' },
        'fail-data': { type: 'string' },
        'changed-data': { type: 'string' },
        'ttl-ms': { type: 'string' },
        width: { type: 'string' },
        'timeout-ms': { type: 'string' },
        template: { type: 'string' },
        only: { type: 'string' },
        json: { type: 'boolean' },
        junit: { type: 'string' },
      },
    })
    if (positionals.length > 1) throw new UsageError(`${positionals.length - 1} unexpected argument(s) after the URL (not shown: they may hold a secret); quote a --header or --data value that has spaces`)
    const template = values.template === undefined ? {} : await readTemplate(values.template)
    const url = positionals[0] ?? template.url
    if (url === undefined) throw new UsageError('URL is required (or url in --template)')
    const options: VerifyOptions = {
      url,
      ...defined('method', values.method ?? template.method),
      ...defined('body', values.data ?? bodyText(template.body)),
      headers: values.header ? headerFlags('--header', values.header) : (template.headers ?? {}),
      ...defined('otherHeaders', values['other-header'] ? headerFlags('--other-header', values['other-header']) : template.otherHeaders),
      ...defined('probe', values.probe ?? template.probe),
      ...defined('failBody', values['fail-data'] ?? bodyText(template.failBody)),
      ...defined('changedBody', values['changed-data'] ?? bodyText(template.changedBody)),
      ...defined('ttlMs', numberFlag('--ttl-ms', values['ttl-ms']) ?? template.ttlMs),
      ...defined('width', numberFlag('--width', values.width) ?? template.width),
      ...defined('timeoutMs', numberFlag('--timeout-ms', values['timeout-ms'])),
      ...defined('only', values.only?.split(',').map((id) => id.trim())),
      ...(values.json ? {} : { onResult: (result) => process.stderr.write(`${result.outcome} ${result.id}\n`) }),
    }
    let report
    try {
      report = await runConformance(options)
    } catch (error) {
      // A bad option (a URL that is not one, an unknown check id) is bad usage.
      if (isOncelyError(error, 'ONCELY_INVALID_OPTION')) throw new UsageError(error.message)
      throw error
    }
    process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : formatTable(report))
    if (values.junit !== undefined) await writeFile(values.junit, formatJUnit(report))
    return report.ok ? EXIT.ok : EXIT.failure
  },
}

function defined<K extends string, V>(name: K, value: V | undefined): { [P in K]: V } | Record<string, never> {
  return value === undefined ? {} : ({ [name]: value } as { [P in K]: V })
}

function headerFlags(flag: string, lines: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = {}
  for (const [index, line] of lines.entries()) {
    const colon = line.indexOf(':')
    // Never echo the line: a mistyped `Authorization Bearer …` holds the secret.
    if (colon <= 0) throw new UsageError(`${flag} number ${index + 1} must look like 'NAME: VALUE' (it is not shown: it may hold a secret)`)
    headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim()
  }
  return headers
}

function numberFlag(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined
  if (!/^\d+$/.test(value) || Number(value) < 1) throw new UsageError(`${flag} must be a positive whole number, got ${JSON.stringify(value)}`)
  return Number(value)
}
