import { defineBrokerProof } from './support/broker-proof.js'

// Skips in CI's embedded pass and when nats does not answer (fails instead under CI=true).
await defineBrokerProof('nats')
