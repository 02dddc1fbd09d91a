import { parseArgs } from 'node:util'
import { createRelay, publisherFromUrl } from '../../outbox/index.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase } from '../database.js'

const NUMBER_FLAGS = {
  'batch-size': 'batchSize',
  'poll-interval-ms': 'pollIntervalMs',
  'lease-ms': 'leaseMs',
  'publish-timeout-ms': 'publishTimeoutMs',
  'max-in-flight': 'maxInFlight',
  'max-attempts': 'maxAttempts',
  'backoff-base-ms': 'backoffBaseMs',
  'backoff-max-ms': 'backoffMaxMs',
  'retention-ms': 'retentionMs',
} as const

export const command: Command = {
  name: 'relay',
  summary: 'publish the outbox to EVENTS_URL (NATS, RabbitMQ) or the log',
  help: `usage: oncely relay [--once] [--events-url URL] [flags] [--database-url URL] [--schema NAME]

Publishes the outbox's events at least once, in commit order per ordering key (docs/outbox.md):
to NATS JetStream (nats://HOST:PORT), RabbitMQ (amqp://USER:PASS@HOST:PORT), or, with no URL,
as lines on stderr. Several relays may run at once. Runs until SIGINT or SIGTERM; with --once it
publishes what is due now, prints the counts and exits (for a cron).

  --once                   publish what is due, then exit
  --events-url URL         the broker (default: $EVENTS_URL, else the log)
  --no-listen              do not LISTEN for the outbox's NOTIFY; poll only
  --batch-size N           events per batch (default 100)
  --poll-interval-ms N     the outbox is read at least this often (default 1000)
  --lease-ms N             a claimed batch is this relay's for N ms (default 30000)
  --publish-timeout-ms N   an unconfirmed publish fails after N ms (default 10000)
  --max-in-flight N        publishes in flight at once (default 16)
  --max-attempts N         attempts before an event is dead (default 10)
  --backoff-base-ms N      first retry delay, doubling (default 1000)
  --backoff-max-ms N       the retry delay's cap (default 300000)
  --retention-ms N         sent events are pruned after N ms, 0 keeps them (default 604800000)
${DATABASE_HELP}

exit codes: 0 stopped by a signal, or --once published everything it claimed;
            1 --once saw a publish fail; 2 bad usage or no database`,
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      options: {
        ...DATABASE_FLAGS,
        once: { type: 'boolean' },
        'events-url': { type: 'string' },
        'no-listen': { type: 'boolean' },
        ...Object.fromEntries(Object.keys(NUMBER_FLAGS).map((flag) => [flag, { type: 'string' as const }])),
      },
      strict: true,
    })
    const tuning: Record<string, number> = {}
    for (const [flag, option] of Object.entries(NUMBER_FLAGS)) {
      const raw = (values as Record<string, unknown>)[flag] as string | undefined
      if (raw === undefined) continue
      if (!/^\d+$/.test(raw)) throw new UsageError(`--${flag} must be a whole number, got ${JSON.stringify(raw)}`)
      tuning[option] = Number(raw)
    }
    const eventsUrl = nonEmpty(values['events-url']) ?? nonEmpty(process.env.EVENTS_URL)
    const log = (line: string) => process.stderr.write(`${line}\n`)
    const { pool, schema } = openDatabase(values)
    pool.on('error', (error) => log(`oncely relay: database connection lost: ${error.message}`))
    let publisher
    let relay
    try {
      publisher = publisherFromUrl(eventsUrl, { log })
      relay = createRelay({ pool, schema, publisher, log, listen: values['no-listen'] !== true && values.once !== true, ...tuning })
    } catch (error) {
      await pool.end()
      throw new UsageError((error as Error).message)
    }
    try {
      if (values.once) return await drainOnce(relay)
      await relay.start()
      process.stdout.write(`oncely relay: publishing schema "${schema}" to ${publisher.name}\n`)
      const signal = await new Promise<NodeJS.Signals>((resolve) => {
        process.once('SIGINT', () => resolve('SIGINT'))
        process.once('SIGTERM', () => resolve('SIGTERM'))
      })
      log(`oncely relay: ${signal}: stopping`)
      await relay.stop()
      return EXIT.ok
    } finally {
      await publisher.close()
      await pool.end()
    }
  },
}

async function drainOnce(relay: ReturnType<typeof createRelay>): Promise<number> {
  const total = { published: 0, failed: 0, dead: 0 }
  for (;;) {
    const batch = await relay.runOnce()
    total.published += batch.published
    total.failed += batch.failed
    total.dead += batch.dead
    // Stop when nothing more is due (what failed waits for its backoff, or the next run).
    if (batch.published === 0) break
  }
  process.stdout.write(`published ${total.published}, failed ${total.failed}, dead ${total.dead}\n`)
  return total.failed > 0 ? EXIT.failure : EXIT.ok
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value
}
