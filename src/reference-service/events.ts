import { createRelay, publisherFromUrl, type OutboxEvent, type Relay } from '../outbox/index.js'
import type { PoolLike } from '../store/postgres/index.js'
import type { ServiceConfig } from './config.js'
import type { ChargeView } from './sql.js'

/**
 * The event every `201` writes in its completion transaction (contract: "After a charge"):
 * `charge.succeeded`, the charge exactly as the 201 body, ordered per customer.
 */
export function chargeSucceededEvent(charge: ChargeView): OutboxEvent {
  return { type: 'charge.succeeded', key: charge.customer, payload: { charge } }
}

/**
 * The relay `npm start` runs beside the API: to NATS JetStream or RabbitMQ when `EVENTS_URL`
 * names one, else to the log. Resolves once it runs; `stop` finishes its batch and closes the
 * broker connection.
 */
export async function startEventRelay(options: { pool: PoolLike; config: Readonly<ServiceConfig>; log: (line: string) => void }): Promise<{ relay: Relay; stop(): Promise<void> }> {
  const { pool, config, log } = options
  const publisher = publisherFromUrl(config.eventsUrl, { log })
  const relay = createRelay({ pool, schema: config.schema, publisher, log })
  try {
    await relay.start()
  } catch (error) {
    // A broker that is down at start is retried by the relay's own backoff once running; only
    // the dedupe-window check failed here.
    log(`oncely relay: ${(error as Error).message}; events wait in the outbox until ${publisher.name} answers`)
    await relay.stop()
    await relay.start().catch(() => undefined)
  }
  return {
    relay,
    async stop() {
      await relay.stop()
      await publisher.close()
    },
  }
}
