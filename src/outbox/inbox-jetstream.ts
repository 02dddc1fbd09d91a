import type { NatsConnection } from '@nats-io/transport-node'
import { invalid, positiveInteger } from '../option-validation.js'
import type { PoolLike, Queryable } from '../store/postgres/executor.js'
import { withTransaction } from '../store/postgres/statement-runner.js'
import { retryHorizonMs } from './backoff.js'
import { parseEnvelope, type EventEnvelope } from './envelope.js'
import { applyHeld } from './inbox-held.js'
import { createOutbox } from './outbox.js'

export interface JetStreamInboxOptions {
  /** The consumer's database: the inbox row and the handler's writes commit there together. (Default: none, required) */
  pool: PoolLike
  /** Schema holding oncely's inbox table. (Default: `oncely`) */
  schema?: string
  /** A NATS connection; the helper never closes it. (Default: none, required) */
  connection: NatsConnection
  /** The durable JetStream consumer, created if absent, and the inbox's consumer name. (Default: none, required) */
  consumer: string
  /** The stream to read. (Default: `ONCELY_EVENTS`) */
  stream?: string
  /** Subjects this consumer takes (one filter: NATS 2.9 has no `filter_subjects`). (Default: `oncely.events.>`) */
  filterSubject?: string
  /**
   * Attempts at one message, each earlier delivery counting as one, before it is terminated: the
   * bound on a poison message. Also the consumer's `max_deliver`. (Default: 5)
   */
  maxDeliver?: number
  /**
   * Messages the consumer may have unacknowledged at once (`max_ack_pending`). Above 1 it is
   * faster, but a message delivered while an earlier one waits out its ack wait (its consumer
   * gone, or a second instance holding it) is applied first: one key's order is then lost. (Default: 1)
   */
  maxAckPending?: number
  /** A failed attempt is retried in hand after this, doubled each time up to `retryMaxMs`, with jitter. (Default: 200) */
  retryBaseMs?: number
  /** The cap of that delay. (Default: 5000) */
  retryMaxMs?: number
  /** A consumer this helper creates reads the stream from its start (`all`) or only what arrives after it (`new`). (Default: `all`) */
  deliver?: 'all' | 'new'
  /** A message not acknowledged within this is redelivered; one in hand is kept with `working()` meanwhile. (Default: 30000) */
  ackWaitMs?: number
  /** Applies one event inside the inbox's transaction; throwing rolls both back and the event is tried again, in hand. */
  handler: (event: EventEnvelope, tx: Queryable) => Promise<void>
  /** Where poison messages and failures are reported. (Default: `console.warn`) */
  log?: (line: string) => void
}

/** A running consumer. */
export interface RunningConsumer {
  /** Stops taking messages; resolves once the one in hand is settled. */
  stop(): Promise<void>
  /** The longest time over which the broker may deliver one message again. */
  readonly redeliveryHorizonMs: number
}

/**
 * Applies each event of a JetStream stream once: the inbox row and the handler's writes commit
 * together, and the message is acknowledged only after that commit, so a crash before the ack
 * redelivers an event the inbox then skips. Messages are handled one at a time, in stream order:
 * the consumer has one unacknowledged message at a time (`maxAckPending`), and a failed
 * one is retried in hand (issue 22), so nothing behind it is applied first, even by another
 * instance of the consumer or after a crash.
 *
 * @example
 * ```ts
 * import { connect } from '@nats-io/transport-node'
 * import { consumeJetStream } from 'oncely/outbox'
 * const running = await consumeJetStream({
 *   pool, connection: await connect({ servers: 'nats://127.0.0.1:4222' }), consumer: 'billing',
 *   handler: async (event, tx) => { await tx.query({ text: 'INSERT INTO seen (id) VALUES ($1)', values: [event.id] }) },
 * })
 * ```
 */
export async function consumeJetStream(options: JetStreamInboxOptions): Promise<RunningConsumer> {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  if (typeof options.consumer !== 'string' || !/^[A-Za-z0-9_-]+$/.test(options.consumer)) throw invalid('consumer', 'must be a durable name: letters, digits, _ or -', options.consumer)
  if (typeof options.handler !== 'function') throw invalid('handler', 'must be a function', options.handler)
  const stream = options.stream ?? 'ONCELY_EVENTS'
  const maxDeliver = positiveInteger('maxDeliver', options.maxDeliver ?? 5)
  const ackWaitMs = positiveInteger('ackWaitMs', options.ackWaitMs ?? 30_000)
  const maxAckPending = positiveInteger('maxAckPending', options.maxAckPending ?? 1)
  const backoff = { baseMs: positiveInteger('retryBaseMs', options.retryBaseMs ?? 200), maxMs: positiveInteger('retryMaxMs', options.retryMaxMs ?? 5000) }
  const log = options.log ?? ((line: string) => console.warn(line))
  const inbox = createOutbox(options.schema === undefined ? {} : { schema: options.schema })
  const { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } = await import('@nats-io/jetstream')
  const { nanos } = await import('@nats-io/transport-node')
  const jsm = await jetstreamManager(options.connection)
  const config = {
    durable_name: options.consumer,
    deliver_policy: options.deliver === 'new' ? DeliverPolicy.New : DeliverPolicy.All,
    ack_policy: AckPolicy.Explicit,
    max_deliver: maxDeliver,
    ack_wait: nanos(ackWaitMs),
    // One message out at a time by default: with more, a message delivered while an earlier one waits for
    // its ack wait to run out (its consumer gone) is applied before that one comes back.
    max_ack_pending: maxAckPending,
    filter_subject: options.filterSubject ?? 'oncely.events.>',
  }
  try {
    await jsm.consumers.add(stream, config)
  } catch {
    // It exists with another configuration: bring it to this one.
    await jsm.consumers.update(stream, options.consumer, { max_deliver: maxDeliver, ack_wait: nanos(ackWaitMs), max_ack_pending: maxAckPending, filter_subject: config.filter_subject })
  }
  const consumer = await jetstream(options.connection).consumers.get(stream, options.consumer)
  const messages = await consumer.consume({ max_messages: Math.max(maxAckPending, 64) })
  const stopping = new AbortController()
  const done = (async () => {
    for await (const message of messages) {
      if (stopping.signal.aborted || options.connection.isClosed()) break
      const event = parseEnvelope(message.data)
      if (!event) {
        log(`oncely inbox ${options.consumer}: message ${message.seq} is not an event envelope; terminated`)
        message.term()
        continue
      }
      // In hand until settled: JetStream is told it is being worked on, so it does not redeliver it.
      const keepAlive = setInterval(() => message.working(), Math.max(1, Math.floor(ackWaitMs / 3)))
      try {
        const outcome = await applyHeld(
          () => withTransaction(options.pool, (tx) => inbox.consume(tx, { consumer: options.consumer, eventId: event.id }, (inTx) => options.handler(event, inTx))).then(() => undefined),
          {
            earlierDeliveries: message.info.deliveryCount - 1,
            maxAttempts: maxDeliver,
            backoff,
            signal: stopping.signal,
            void: () => options.connection.isClosed(),
            onFailure: (attempt, last, error) =>
              log(`oncely inbox ${options.consumer}: event ${event.id} failed (attempt ${attempt} of ${maxDeliver}${last ? ', the last: terminated' : ''}): ${(error as Error).message}`),
          },
        )
        // Acknowledged after the commit: a lost ack only redelivers what the inbox now skips.
        if (outcome === 'applied') message.ack()
        else if (outcome === 'exhausted') message.term()
        else if (!options.connection.isClosed()) message.nak()
      } finally {
        clearInterval(keepAlive)
      }
    }
  })().catch((error: unknown) => {
    // The connection closed under the consumer: what it held is redelivered to the next one.
    log(`oncely inbox ${options.consumer}: stopped: ${(error as Error).message}`)
  })
  return {
    // Each delivery may be held through every retry delay, then wait out the ack wait.
    redeliveryHorizonMs: retryHorizonMs(backoff, maxDeliver, ackWaitMs) * maxDeliver,
    async stop() {
      stopping.abort()
      await messages.close()
      await done
    },
  }
}
