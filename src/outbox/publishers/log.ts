import type { Publisher } from '../publisher.js'

/**
 * Writes each event as one line to `write`: what `npm start` uses when no `EVENTS_URL` is set.
 *
 * @example
 * ```ts
 * import { createLogPublisher } from 'oncely/outbox'
 * const publisher = createLogPublisher({ write: (line) => console.log(line) })
 * ```
 */
export function createLogPublisher(options: { write?: (line: string) => void } = {}): Publisher {
  const write = options.write ?? ((line: string) => process.stderr.write(`${line}\n`))
  return {
    name: 'log',
    async publish(message) {
      write(`event ${message.type} ${message.body.toString('utf8')}`)
    },
    async close() {},
  }
}
