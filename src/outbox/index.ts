/**
 * `oncely/outbox`: events written in the transaction that completes a key, a relay that
 * publishes them at least once in per-key commit order, and an inbox that applies each once
 * (Invariants 8 and 13). docs/outbox.md tells the whole story.
 */
export { createOutbox, enqueue, consume } from './outbox.js'
export type { Outbox, OutboxOptions, PreparedEvent } from './outbox.js'
export type { OutboxEvent, EnqueuedEvent } from './event.js'
export type { InboxEntry, ConsumeResult } from './inbox.js'
export { createRelay } from './relay.js'
export type { Relay, RelayBatchResult } from './relay.js'
export type { RelayOptions } from './relay-options.js'
export type { Publisher } from './publisher.js'
export { parseEnvelope, ENVELOPE_CONTENT_TYPE, ENVELOPE_SCHEMA_VERSION } from './envelope.js'
export type { EventEnvelope, OutboxMessage } from './envelope.js'
export { createLogPublisher } from './publishers/log.js'
export { createJetStreamPublisher } from './publishers/jetstream.js'
export type { JetStreamPublisherOptions } from './publishers/jetstream.js'
export { createRabbitMqPublisher } from './publishers/rabbitmq.js'
export type { RabbitMqPublisherOptions } from './publishers/rabbitmq.js'
export { publisherFromUrl } from './publishers/from-url.js'
export { listEvents, retryDeadEvents, pruneSentEvents, outboxBacklog } from './admin.js'
export type { OutboxAdminOptions, RetryDeadResult } from './admin.js'
export { uuidv7 } from './uuid-v7.js'
export { consumeJetStream } from './inbox-jetstream.js'
export type { JetStreamInboxOptions, RunningConsumer } from './inbox-jetstream.js'
export { consumeRabbitMq, pruneInbox } from './inbox-rabbitmq.js'
export type { RabbitMqInboxOptions } from './inbox-rabbitmq.js'
