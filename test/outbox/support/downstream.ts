import net from 'node:net'
import { connect as natsConnect } from '@nats-io/transport-node'
import { jetstreamManager } from '@nats-io/jetstream'
import amqp from 'amqplib'
import { consumeJetStream, consumeRabbitMq, createJetStreamPublisher, type EventEnvelope } from '../../../src/outbox/index.js'
import type { Queryable } from '../../../src/store/postgres/index.js'
import type { TestDatabase } from '../../helpers/db.js'
import { waitUntil } from './wait.js'

export type Broker = 'nats' | 'rabbitmq'
export const BROKERS: Record<Broker, { port: number; url: (port: number) => string }> = {
  nats: { port: 4222, url: (port) => `nats://127.0.0.1:${port}` },
  rabbitmq: { port: 5672, url: (port) => `amqp://guest:guest@127.0.0.1:${port}` },
}

/** Whether something accepts TCP connections on the port. */
export function reachable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    socket.once('connect', () => (socket.destroy(), resolve(true)))
    socket.once('error', () => resolve(false))
  })
}

/** A consumer that applies this scenario's `charge.succeeded` events through the inbox. */
export interface Downstream {
  /** Rows the handler wrote, and how many distinct charges they name. */
  applied(): Promise<{ total: number; chargeIds: string[] }>
  waitForApplied(count: number, timeoutMs?: number): Promise<void>
  stop(): Promise<void>
}

export async function startDownstream(broker: Broker, db: TestDatabase, tag: string, customerPrefix: string): Promise<Downstream> {
  await db.pool.query('CREATE TABLE IF NOT EXISTS applied (tag text NOT NULL, event_id text NOT NULL, charge_id text NOT NULL)')
  const handler = async (event: EventEnvelope, tx: Queryable) => {
    const charge = (event.data as { charge?: { id: string; customer: string } }).charge
    // The shared brokers carry other tests' events too: apply only this scenario's.
    if (!charge?.customer.startsWith(customerPrefix)) return
    await tx.query({ text: 'INSERT INTO applied (tag, event_id, charge_id) VALUES ($1, $2, $3)', values: [tag, event.id, charge.id] })
  }
  let stop: () => Promise<void>
  if (broker === 'nats') {
    const url = BROKERS.nats.url(BROKERS.nats.port)
    const ensure = createJetStreamPublisher({ servers: url })
    await ensure.checkDedupeWindow?.(0, () => undefined)
    await ensure.close()
    const connection = await natsConnect({ servers: url })
    const durable = `oncely_test_${tag}`
    const running = await consumeJetStream({ pool: db.pool, schema: db.schema, connection, consumer: durable, filterSubject: 'oncely.events.charge.succeeded', deliver: 'new', handler, log: () => undefined })
    stop = async () => {
      await running.stop()
      await (await jetstreamManager(connection)).consumers.delete('ONCELY_EVENTS', durable).catch(() => undefined)
      await connection.close()
    }
  } else {
    const connection = await amqp.connect(BROKERS.rabbitmq.url(BROKERS.rabbitmq.port))
    const queue = `oncely_test_${tag}`
    const running = await consumeRabbitMq({ pool: db.pool, schema: db.schema, connection, queue, bindingKeys: ['charge.succeeded'], handler, log: () => undefined })
    stop = async () => {
      await running.stop()
      const channel = await connection.createChannel()
      await channel.deleteQueue(queue)
      await channel.deleteQueue(`${queue}.dead`)
      await channel.deleteExchange(`${queue}.dead`)
      await channel.close()
      await connection.close()
    }
  }
  const applied = async () => {
    const { rows } = await db.pool.query<{ charge_id: string }>('SELECT charge_id FROM applied WHERE tag = $1', [tag])
    return { total: rows.length, chargeIds: rows.map((row) => row.charge_id) }
  }
  return {
    applied,
    waitForApplied: (count, timeoutMs = 60_000) => waitUntil(`${count} events are applied downstream (${tag})`, async () => (await applied()).total >= count, timeoutMs),
    stop: () => stop(),
  }
}
