import { invalid } from '../../option-validation.js'
import type { Publisher } from '../publisher.js'
import { createJetStreamPublisher } from './jetstream.js'
import { createLogPublisher } from './log.js'
import { createRabbitMqPublisher } from './rabbitmq.js'

/**
 * The publisher an `EVENTS_URL` names: `nats://…` (JetStream), `amqp://…` (RabbitMQ), or, with
 * none, the log.
 *
 * @example
 * ```ts
 * import { publisherFromUrl } from 'oncely/outbox'
 * const publisher = publisherFromUrl(process.env.EVENTS_URL)
 * ```
 */
export function publisherFromUrl(url: string | undefined, options: { log?: (line: string) => void } = {}): Publisher {
  if (url === undefined || url === '') return createLogPublisher(options.log === undefined ? {} : { write: options.log })
  if (/^(nats|tls):\/\//.test(url)) return createJetStreamPublisher({ servers: url })
  if (/^amqps?:\/\//.test(url)) return createRabbitMqPublisher({ url })
  throw invalid('EVENTS_URL', 'must be a nats:// or amqp:// URL', url.replace(/\/\/[^@/]*@/, '//***@'))
}
