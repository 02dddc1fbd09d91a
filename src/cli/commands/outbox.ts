import { parseArgs } from 'node:util'
import { listEvents, retryDeadEvents } from '../../outbox/index.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase } from '../database.js'

export const command: Command = {
  name: 'outbox',
  summary: 'list dead or waiting events, re-queue dead ones',
  help: `usage: oncely outbox list [--dead | --pending] [--limit N] [--json]
       oncely outbox retry ID... | --all

list    events oldest first: dead letters (--dead, the default) or events waiting (--pending),
        with their attempts and last error. A dead event blocks the later events of its
        ordering key until it is re-queued.
retry   re-queues dead events with a fresh attempt count, keeping their place in their key's
        order; prints each id re-queued. An id that is not dead is reported and skipped.

  --limit N            list at most N events (default 100)
  --json               print JSON
${DATABASE_HELP}

exit codes: 0 done, 1 an id given to retry was not a dead event, 2 bad usage or no database`,
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { ...DATABASE_FLAGS, dead: { type: 'boolean' }, pending: { type: 'boolean' }, all: { type: 'boolean' }, limit: { type: 'string' }, json: { type: 'boolean' } },
      strict: true,
    })
    const [action, ...ids] = positionals
    if (action !== 'list' && action !== 'retry') throw new UsageError('say list or retry')
    if (action === 'list' && ids.length > 0) throw new UsageError(`list takes no ids, got ${ids.join(' ')}`)
    if (action === 'list' && values.dead && values.pending) throw new UsageError('--dead and --pending exclude each other')
    if (action === 'retry' && (values.all === true) === ids.length > 0) throw new UsageError('retry takes event ids or --all, not both and not neither')
    if (ids.some((id) => !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id))) throw new UsageError('an event id is a UUID')
    const limit = values.limit === undefined ? 100 : Number(values.limit)
    if (!Number.isSafeInteger(limit) || limit <= 0) throw new UsageError(`--limit must be a positive whole number, got ${JSON.stringify(values.limit)}`)
    const { pool, schema } = openDatabase(values)
    try {
      if (action === 'list') {
        const events = await listEvents({ pool, schema, status: values.pending ? 'pending' : 'dead', limit })
        if (values.json) process.stdout.write(`${JSON.stringify(events, null, 2)}\n`)
        else if (events.length === 0) process.stdout.write(`no ${values.pending ? 'waiting' : 'dead'} events\n`)
        else {
          for (const event of events) {
            process.stdout.write(`${event.id}  ${event.type}  key=${event.ordering_key ?? '-'}  attempts=${event.attempts}  ${event.last_error ?? ''}\n`)
          }
        }
        return EXIT.ok
      }
      const requeued = await retryDeadEvents({ pool, schema, ids: values.all ? 'all' : ids })
      for (const id of requeued) process.stdout.write(`re-queued ${id}\n`)
      const missing = ids.filter((id) => !requeued.includes(id.toLowerCase()))
      for (const id of missing) process.stderr.write(`oncely outbox: ${id} is not a dead event; nothing done\n`)
      if (values.all && requeued.length === 0) process.stdout.write('no dead events\n')
      return missing.length > 0 ? EXIT.failure : EXIT.ok
    } finally {
      await pool.end()
    }
  },
}
