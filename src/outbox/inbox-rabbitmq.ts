import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib'
import { invalid, positiveInteger } from '../option-validation.js'
import type { PoolLike, Queryable } from '../store/postgres/executor.js'
import { withTransaction } from '../store/postgres/statement-runner.js'
import { bind } from '../store/postgres/statements-outbox.js'
import { parseEnvelope, type EventEnvelope } from './envelope.js'
import { applyHeld } from './inbox-held.js'
import { createOutbox } from './outbox.js'

export interface RabbitMqInboxOptions {
  /** The consumer's database: the inbox row and the handler's writes commit there together. (Default: none, required) */
  pool: PoolLike
  /** Schema holding oncely's inbox table. (Default: `oncely`) */
  schema?: string
  /** An open amqplib connection; the helper never closes it. (Default: none, required) */
  connection: ChannelModel
  /** The queue, declared if absent (a quorum queue), and the inbox's consumer name. (Default: none, required) */
  queue: string
  /** The topic exchange the relay publishes to. (Default: `oncely.events`) */
  exchange?: string
  /** Routing keys bound to the queue. (Default: `['#']`, every event) */
  bindingKeys?: string[]
  /**
   * Attempts at one message, each earlier delivery counting as one, before it goes to
   * `<queue>.dead`: the bound on a poison message. Also the quorum queue's `x-delivery-limit`. (Default: 5)
   */
  deliveryLimit?: number
  /** A failed attempt is retried in hand after this, doubled each time up to `retryMaxMs`, with jitter. (Default: 200) */
  retryBaseMs?: number
  /** The cap of that delay. (Default: 5000) */
  retryMaxMs?: number
  /**
   * Declare the queue with `x-single-active-consumer`: of several instances consuming it, one
   * receives at a time, so they cannot apply one key's events side by side out of order. A queue
   * declared before without it cannot gain it (RabbitMQ refuses an inequivalent argument, 406):
   * pass `false` for such a queue and run one instance, or declare it anew. (Default: true)
   */
  singleActiveConsumer?: boolean
  /** Messages in hand at once; they are applied one at a time, in order. (Default: 32) */
  prefetch?: number
  /** Applies one event inside the inbox's transaction; throwing rolls both back and the event is tried again, in hand. */
  handler: (event: EventEnvelope, tx: Queryable) => Promise<void>
  /** Where poison messages and failures are reported. (Default: `console.warn`) */
  log?: (line: string) => void
}

/**
 * Applies each event of a RabbitMQ queue once: the inbox row and the handler's writes commit
 * together and the message is acknowledged after that commit. Messages are applied one at a
 * time in delivery order, and a failed one is retried in hand, never requeued behind the ones
 * prefetched after it (issue 22). A message that keeps failing is dead-lettered to
 * `<queue>.dead` after `deliveryLimit` attempts; one that is not an event goes there at once.
 *
 * @example
 * ```ts
 * import amqp from 'amqplib'
 * import { consumeRabbitMq } from 'oncely/outbox'
 * const running = await consumeRabbitMq({
 *   pool, connection: await amqp.connect('amqp://guest:guest@127.0.0.1:5672'), queue: 'billing',
 *   handler: async (event, tx) => { await tx.query({ text: 'INSERT INTO seen (id) VALUES ($1)', values: [event.id] }) },
 * })
 * ```
 */
export async function consumeRabbitMq(options: RabbitMqInboxOptions): Promise<{ stop(): Promise<void> }> {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  if (typeof options.queue !== 'string' || options.queue.length === 0) throw invalid('queue', 'must be a non-empty string', options.queue)
  if (typeof options.handler !== 'function') throw invalid('handler', 'must be a function', options.handler)
  if (options.singleActiveConsumer !== undefined && typeof options.singleActiveConsumer !== 'boolean') throw invalid('singleActiveConsumer', 'must be a boolean', options.singleActiveConsumer)
  const exchange = options.exchange ?? 'oncely.events'
  const deliveryLimit = positiveInteger('deliveryLimit', options.deliveryLimit ?? 5)
  const prefetch = positiveInteger('prefetch', options.prefetch ?? 32)
  const backoff = { baseMs: positiveInteger('retryBaseMs', options.retryBaseMs ?? 200), maxMs: positiveInteger('retryMaxMs', options.retryMaxMs ?? 5000) }
  const log = options.log ?? ((line: string) => console.warn(line))
  const inbox = createOutbox(options.schema === undefined ? {} : { schema: options.schema })
  const channel: Channel = await options.connection.createChannel()
  const dead = `${options.queue}.dead`
  await channel.assertExchange(exchange, 'topic', { durable: true })
  await channel.assertExchange(dead, 'fanout', { durable: true })
  await channel.assertQueue(dead, { durable: true })
  await channel.bindQueue(dead, dead, '')
  await channel.assertQueue(options.queue, {
    durable: true,
    arguments: {
      'x-queue-type': 'quorum',
      'x-delivery-limit': deliveryLimit,
      'x-dead-letter-exchange': dead,
      ...(options.singleActiveConsumer === false ? {} : { 'x-single-active-consumer': true }),
    },
  })
  for (const key of options.bindingKeys ?? ['#']) await channel.bindQueue(options.queue, exchange, key)
  await channel.prefetch(prefetch)
  // Once the channel is gone, its deliveries are void: the broker gives them to the next consumer.
  let closed = false
  channel.on('close', () => (closed = true))
  channel.on('error', () => undefined)
  const stopping = new AbortController()
  // One at a time, in delivery order: the callback is not awaited by amqplib.
  let chain = Promise.resolve()
  const handle = async (message: ConsumeMessage) => {
    if (closed || stopping.signal.aborted) return
    const event = parseEnvelope(message.content)
    if (!event) {
      log(`oncely inbox ${options.queue}: a message that is not an event envelope was dead-lettered`)
      channel.nack(message, false, false)
      return
    }
    const outcome = await applyHeld(
      () => withTransaction(options.pool, (tx) => inbox.consume(tx, { consumer: options.queue, eventId: event.id }, (inTx) => options.handler(event, inTx))).then(() => undefined),
      {
        earlierDeliveries: earlierDeliveries(message),
        maxAttempts: deliveryLimit,
        backoff,
        signal: stopping.signal,
        void: () => closed,
        onFailure: (attempt, last, error) =>
          log(`oncely inbox ${options.queue}: event ${event.id} failed (attempt ${attempt} of ${deliveryLimit}${last ? ', the last: dead-lettered' : ''}): ${(error as Error).message}`),
      },
    )
    if (closed) return
    if (outcome === 'applied') channel.ack(message)
    else if (outcome === 'exhausted') channel.nack(message, false, false)
    // Abandoned on stop: left unacknowledged, returned to the queue in order when the channel closes.
  }
  const { consumerTag } = await channel.consume(options.queue, (message) => {
    if (message) chain = chain.then(() => handle(message)).catch(() => undefined)
  })
  return {
    async stop() {
      stopping.abort()
      await channel.cancel(consumerTag).catch(() => undefined)
      await chain
      await channel.close().catch(() => undefined)
    },
  }
}

/** Deliveries before this one: the quorum queue's count, or one when only `redelivered` says so. */
function earlierDeliveries(message: ConsumeMessage): number {
  const count = (message.properties.headers as Record<string, unknown> | undefined)?.['x-delivery-count']
  if (typeof count === 'number' && Number.isSafeInteger(count) && count >= 0) return count
  return message.fields.redelivered ? 1 : 0
}

/**
 * Deletes inbox rows older than `olderThanMs`, in small batches. Keep them at least as long as
 * an event can come again (the broker's redelivery horizon, and the relay's retry horizon when
 * the broker's dedupe window is shorter): a shorter window warns, since a late duplicate would
 * then be applied twice.
 *
 * @example
 * ```ts
 * import { pruneInbox } from 'oncely/outbox'
 * await pruneInbox({ pool, olderThanMs: 14 * 86_400_000, redeliveryHorizonMs: 3_600_000 })
 * ```
 */
export async function pruneInbox(options: { pool: Queryable; schema?: string; olderThanMs: number; redeliveryHorizonMs: number; batchSize?: number; log?: (line: string) => void }): Promise<number> {
  const olderThanMs = positiveInteger('olderThanMs', options.olderThanMs)
  if (olderThanMs < options.redeliveryHorizonMs) {
    ;(options.log ?? ((line: string) => console.warn(line)))(
      `oncely inbox: pruning after ${olderThanMs} ms, but an event may be delivered again up to ${options.redeliveryHorizonMs} ms later; a late duplicate would be applied twice`,
    )
  }
  const { statements } = createOutbox(options.schema === undefined ? {} : { schema: options.schema })
  const batchSize = options.batchSize ?? 500
  let total = 0
  for (;;) {
    const deleted = (await options.pool.query(bind(statements.inboxPrune, [olderThanMs, batchSize]))).rowCount ?? 0
    total += deleted
    if (deleted < batchSize) return total
  }
}
