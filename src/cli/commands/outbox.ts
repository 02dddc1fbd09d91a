import { parseArgs } from 'node:util'
import { listEvents, retryDeadEvents } from '../../outbox/index.js'
import { EXIT, UsageError, type Command } from '../command.js'
import { DATABASE_FLAGS, DATABASE_HELP, openDatabase } from '../database.js'

export const command: Command = {
  name: 'outbox',
  summary: 'list dead or waiting events, re-queue dead ones',
  help: `usage: oncely outbox list [--dead | --pending] [--limit N] [--json]
       oncely outbox retry (ID... | --all) (--inbox-retention-ms N | --force)

list    events oldest first: dead letters (--dead, the default) or events waiting (--pending),
        with their attempts and last error. A dead event blocks the later events of its
        ordering key until it is re-queued.
retry   re-queues dead events with a fresh attempt count, keeping their place in their key's
        order; prints each id re-queued. An id that is not dead is reported and skipped.
        A dead event may have reached its consumers anyway; their inbox remembers it only
        until pruned, so an event older than --inbox-retention-ms is refused (published
        again, it would be applied twice). --force re-queues them anyway.

  --limit N            list at most N events (default 100)
  --inbox-retention-ms N  how long the consumers keep inbox rows, less the time a
                       re-queued event may take to arrive (retry: required unless --force)
  --force              retry: re-queue events older than that too
  --json               print JSON
${DATABASE_HELP}

exit codes: 0 done, 1 an id given to retry was not a dead event or was refused, 2 bad usage or no database`,
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { ...DATABASE_FLAGS, dead: { type: 'boolean' }, pending: { type: 'boolean' }, all: { type: 'boolean' }, limit: { type: 'string' }, json: { type: 'boolean' }, 'inbox-retention-ms': { type: 'string' }, force: { type: 'boolean' } },
      strict: true,
    })
    const [action, ...ids] = positionals
    if (action !== 'list' && action !== 'retry') throw new UsageError('say list or retry')
    if (action === 'list' && ids.length > 0) throw new UsageError(`list takes no ids, got ${ids.join(' ')}`)
    if (action === 'list' && values.dead && values.pending) throw new UsageError('--dead and --pending exclude each other')
    if (action === 'retry' && (values.all === true) === ids.length > 0) throw new UsageError('retry takes event ids or --all, not both and not neither')
    if (ids.some((id) => !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id))) throw new UsageError('an event id is a UUID')
    if (action === 'list' && (values.force || values['inbox-retention-ms'] !== undefined)) throw new UsageError('--inbox-retention-ms and --force are for retry')
    if (action === 'retry' && (values.force === true) === (values['inbox-retention-ms'] !== undefined)) {
      throw new UsageError('retry takes --inbox-retention-ms N (how long the consumers keep inbox rows) or --force, one of them')
    }
    const retention = values['inbox-retention-ms'] === undefined ? undefined : Number(values['inbox-retention-ms'])
    if (retention !== undefined && (!Number.isSafeInteger(retention) || retention <= 0)) {
      throw new UsageError(`--inbox-retention-ms must be a positive whole number, got ${JSON.stringify(values['inbox-retention-ms'])}`)
    }
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
      const target = values.all ? ('all' as const) : ids
      const { requeued, refused } = await retryDeadEvents(
        retention === undefined ? { pool, schema, ids: target, force: true } : { pool, schema, ids: target, inboxRetentionMs: retention },
      )
      for (const id of requeued) process.stdout.write(`re-queued ${id}\n`)
      for (const id of refused) {
        process.stderr.write(`oncely outbox: ${id} is older than --inbox-retention-ms: a consumer may have applied it and pruned its inbox row; not re-queued (--force re-queues it)\n`)
      }
      const missing = ids.filter((id) => !requeued.includes(id.toLowerCase()) && !refused.includes(id.toLowerCase()))
      for (const id of missing) process.stderr.write(`oncely outbox: ${id} is not a dead event; nothing done\n`)
      if (values.all && requeued.length === 0 && refused.length === 0) process.stdout.write('no dead events\n')
      return missing.length > 0 || refused.length > 0 ? EXIT.failure : EXIT.ok
    } finally {
      await pool.end()
    }
  },
}
