#!/usr/bin/env node
import { readFileSync } from 'node:fs'
import { EXIT, UsageError, type Command } from './command.js'

/** Every command, by name; `commands/<name>.ts` is loaded only when asked for. */
const COMMANDS: Record<string, { summary: string }> = {
  serve: { summary: 'run the reference payments API' },
  provider: { summary: 'run the fake payment provider alone' },
  migrate: { summary: 'apply the schema to DATABASE_URL (--dry-run prints it)' },
  sweep: { summary: 'delete expired keys in small batches' },
  doctor: { summary: 'compare the live schema with the expected one' },
  race: { summary: "reproduce the article's measured table" },
  request: { summary: 'send a request with a persisted key and safe retries' },
  keys: { summary: 'list, show and release idempotency keys' },
  stats: { summary: 'counts by state, oldest running claim, table size, sweeper lag' },
  relay: { summary: 'publish the outbox to EVENTS_URL (NATS, RabbitMQ) or the log' },
  outbox: { summary: 'list dead or waiting events, re-queue dead ones' },
  reconcile: { summary: 'settle stuck claims now, printing each decision' },
  console: { summary: "the operators' web console against DATABASE_URL" },
  verify: { summary: 'run the conformance checks against an Idempotency-Key endpoint' },
}

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((name) => name.length))
  const lines = Object.entries(COMMANDS).map(([name, { summary }]) => `  ${name.padEnd(width)}  ${summary}`)
  return [
    'usage: oncely <command> [flags]',
    '',
    'commands:',
    ...lines,
    `  ${'help'.padEnd(width)}  this text; \`oncely <command> --help\` for one command`,
    '',
    'oncely --version prints the version.',
    '',
  ].join('\n')
}

/** The package's version: package.json sits two folders up from both src/cli/ and dist/cli/. */
function version(): string {
  return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv
  if (name === '--version' || name === '-v') {
    process.stdout.write(`${version()}\n`)
    return EXIT.ok
  }
  if (name === undefined || name === 'help' || name === '--help' || name === '-h') {
    const topic = name === 'help' ? rest[0] : undefined
    if (topic === undefined) {
      process.stdout.write(usage())
      return EXIT.ok
    }
    return main([topic, '--help'])
  }
  const entry = COMMANDS[name]
  if (!entry) {
    process.stderr.write(`oncely: unknown command '${name}'\n\n${usage()}`)
    return EXIT.usage
  }
  const { command } = (await import(`./commands/${name}.js`)) as { command: Command }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(command.help.endsWith('\n') ? command.help : `${command.help}\n`)
    return EXIT.ok
  }
  try {
    return await command.run(rest)
  } catch (error) {
    if (error instanceof UsageError || (error instanceof TypeError && 'code' in error && String(error.code).startsWith('ERR_PARSE_ARGS'))) {
      process.stderr.write(`oncely ${name}: ${error.message}\nsee 'oncely ${name} --help'\n`)
      return EXIT.usage
    }
    throw error
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (error: unknown) => {
    process.stderr.write(`oncely: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`)
    process.exitCode = EXIT.failure
  },
)
