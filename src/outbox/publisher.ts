import type { OutboxMessage } from './envelope.js'

/**
 * Where the relay hands events: NATS JetStream, RabbitMQ, the log, or your own (Kafka, SQS…).
 * `publish` resolves only once the broker has taken the message durably, and rejects otherwise;
 * the relay then retries it with backoff. It may be called for the same event more than once
 * (at-least-once): pass `message.id` as the broker's dedupe id where it has one.
 *
 * @example
 * ```ts
 * import type { Publisher } from 'oncely/outbox'
 * const publisher: Publisher = {
 *   name: 'stdout',
 *   async publish(message) {
 *     process.stdout.write(`${message.type} ${message.body.toString()}\n`)
 *   },
 *   async close() {},
 * }
 * ```
 */
export interface Publisher {
  /** For logs: `nats`, `rabbitmq`, `log`… */
  readonly name: string
  publish(message: OutboxMessage): Promise<void>
  /**
   * Called once when the relay starts, with the longest time over which it may publish one
   * event again (lease plus the whole backoff): a broker that dedupes over a shorter window
   * should say so through `warn`. (Default: nothing checked)
   */
  checkDedupeWindow?(retryHorizonMs: number, warn: (line: string) => void): Promise<void>
  close(): Promise<void>
}
