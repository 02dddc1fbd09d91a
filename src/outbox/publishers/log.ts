import type { Publisher } from '../publisher.js'

/**
 * Writes each event as one line to `write`: what `npm start` uses when no `EVENTS_URL` is set.
 * The lines of one relay batch are written together, in one call, once the batch is handed over
 * (a write per event cost the API process a system call per request, issue 21); `close` writes
 * what is left.
 *
 * @example
 * ```ts
 * import { createLogPublisher } from 'oncely/outbox'
 * const publisher = createLogPublisher({ write: (line) => console.log(line) })
 * ```
 */
export function createLogPublisher(options: { write?: (line: string) => void } = {}): Publisher {
  const write = options.write ?? ((line: string) => process.stderr.write(`${line}\n`))
  let pending: string[] = []
  let scheduled: NodeJS.Immediate | undefined
  const flush = () => {
    scheduled = undefined
    if (pending.length === 0) return
    const lines = pending
    pending = []
    write(lines.join('\n'))
  }
  return {
    name: 'log',
    async publish(message) {
      pending.push(`event ${message.type} ${message.body.toString('utf8')}`)
      scheduled ??= setImmediate(flush)
    },
    async close() {
      if (scheduled !== undefined) clearImmediate(scheduled)
      flush()
    },
  }
}
