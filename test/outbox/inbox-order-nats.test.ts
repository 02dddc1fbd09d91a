import { defineInboxOrder } from './support/inbox-order.js'

// Skips in CI's embedded pass and when nats does not answer (fails instead under CI=true).
await defineInboxOrder('nats')
