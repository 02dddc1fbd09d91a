import { randomBytes } from 'node:crypto'
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node'
import { AckPolicy, jetstreamManager } from '@nats-io/jetstream'
import amqp, { type ChannelModel } from 'amqplib'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { toMessage } from '../../../src/outbox/envelope.js'
import { consumeJetStream, consumeRabbitMq, createJetStreamPublisher, createRabbitMqPublisher, uuidv7, type EventEnvelope, type Publisher } from '../../../src/outbox/index.js'
import type { Queryable } from '../../../src/store/postgres/index.js'
import { versionIndependentPass } from '../../helpers/test-passes.js'
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js'
import { BROKERS, reachable, type Broker } from './downstream.js'
import { waitUntil } from './wait.js'

/** What one consumer instance is, to the tests: started on its own connection, stopped or cut. */
interface Instance {
  stop(): Promise<void>
  /** Closes the connection under the consumer without stopping it: a consumer process gone. */
  drop(): Promise<void>
}

type Handler = (event: EventEnvelope, tx: Queryable) => Promise<void>

/**
 * Issue 22, point 2: one key's events are applied in order across a handler failure and across
 * a consumer that disappears holding messages, against the machine's real brokers. Same skip
 * rule as the broker proof: skipped with a message when the broker does not answer, failed
 * instead under CI=true.
 */
export async function defineInboxOrder(broker: Broker): Promise<void> {
  const brokerPass = versionIndependentPass
  const available = await reachable(BROKERS[broker].port)
  const missing = brokerPass && !available
  if (missing && process.env.CI === 'true') {
    it(`${broker} is reachable on port ${BROKERS[broker].port} (required under CI=true)`, () => {
      expect.fail(`${broker} does not answer on 127.0.0.1:${BROKERS[broker].port}`)
    })
    return
  }
  const reason = !brokerPass ? 'under CI=true, runs in the DATABASE_URL pass only' : missing ? `${broker} not reachable on 127.0.0.1:${BROKERS[broker].port}: skipped` : ''
  const url = BROKERS[broker].url(BROKERS[broker].port)

  let db: TestDatabase
  beforeAll(async () => {
    if (reason !== '') return
    db = await createTestDatabase()
    await db.pool.query('CREATE TABLE applied_order (position bigint GENERATED ALWAYS AS IDENTITY, tag text NOT NULL, n integer NOT NULL)')
  })
  afterAll(async () => {
    await db?.close()
  })

  /** One test's own event type, consumer and table rows. */
  const scenario = async () => {
    const tag = `order_${broker}_${randomBytes(4).toString('hex')}`
    const type = `${tag}.happened`
    const name = `oncely_test_${tag}`
    const cleanups: (() => Promise<void>)[] = []
    const start = async (handler: Handler, attempts = 5, retryMs?: number): Promise<Instance> => {
      const retry = retryMs === undefined ? {} : { retryBaseMs: retryMs, retryMaxMs: retryMs }
      if (broker === 'nats') {
        const connection: NatsConnection = await natsConnect({ servers: url })
        const running = await consumeJetStream({ pool: db.pool, schema: db.schema, connection, consumer: name, filterSubject: `oncely.events.${type}`, ackWaitMs: 2000, maxDeliver: attempts, ...retry, handler, log: () => undefined })
        return { stop: async () => (await running.stop(), await connection.close()), drop: () => connection.close() }
      }
      const connection: ChannelModel = await amqp.connect(url)
      connection.on('error', () => undefined)
      const running = await consumeRabbitMq({ pool: db.pool, schema: db.schema, connection, queue: name, bindingKeys: [type], deliveryLimit: attempts, ...retry, handler, log: () => undefined })
      return { stop: async () => (await running.stop(), await connection.close()), drop: () => connection.close() }
    }
    let publisher: Publisher
    if (broker === 'nats') {
      publisher = createJetStreamPublisher({ servers: url })
      await publisher.checkDedupeWindow?.(0, () => undefined)
      cleanups.push(async () => {
        const connection = await natsConnect({ servers: url })
        await (await jetstreamManager(connection)).consumers.delete('ONCELY_EVENTS', name).catch(() => undefined)
        await connection.close()
      })
    } else {
      publisher = createRabbitMqPublisher({ url })
      cleanups.push(async () => {
        const connection = await amqp.connect(url)
        const channel = await connection.createChannel()
        await channel.deleteQueue(name)
        await channel.deleteQueue(`${name}.dead`)
        await channel.deleteExchange(`${name}.dead`)
        await connection.close()
      })
    }
    cleanups.push(() => publisher.close())
    let seq = 0
    const publish = async (key: string, n: number) => {
      seq++
      await publisher.publish(toMessage({ id: uuidv7(), seq: String(seq), type, ordering_key: key, payload: JSON.stringify({ tag, key, n }), headers: {}, occurred_at: new Date(), attempts: 1 }))
    }
    /** The handler every instance runs: records `key:n` in commit order, after `before` (which may throw). */
    const recording = (before: (data: { key: string; n: number }) => Promise<void> | void): Handler => async (event, tx) => {
      const data = event.data as { tag: string; key: string; n: number }
      await before(data)
      await tx.query({ text: 'INSERT INTO applied_order (tag, n) VALUES ($1, $2)', values: [`${tag}:${data.key}`, data.n] })
    }
    const applied = async (key: string) =>
      (await db.pool.query<{ n: number }>('SELECT n FROM applied_order WHERE tag = $1 ORDER BY position', [`${tag}:${key}`])).rows.map((row) => row.n)
    const waitForApplied = (key: string, count: number) => waitUntil(`${count} events of ${key} are applied`, async () => (await applied(key)).length >= count, 60_000)
    /** RabbitMQ's dead-letter queue of this consumer: how many it holds. */
    const deadLetters = async () => {
      const connection = await amqp.connect(url)
      try {
        return (await (await connection.createChannel()).checkQueue(`${name}.dead`)).messageCount
      } finally {
        await connection.close()
      }
    }
    /** JetStream's count of this consumer's deliveries, redeliveries included. */
    const deliveries = async () => {
      const connection = await natsConnect({ servers: url })
      try {
        return (await (await jetstreamManager(connection)).consumers.info('ONCELY_EVENTS', name)).delivered.consumer_seq
      } finally {
        await connection.close()
      }
    }
    return { name, type, start, publish, deliveries, recording, applied, waitForApplied, deadLetters, cleanup: async () => { for (const cleanup of cleanups.reverse()) await cleanup() } }
  }

  describe.skipIf(reason !== '')(`the inbox on ${broker} applies one key's events in order${reason ? ` (${reason})` : ''}`, () => {
    it('a handler that fails once on event 2: applied 1, 2, 3, each once', { timeout: 90_000 }, async () => {
      const run = await scenario()
      let failures = 0
      const consumer = await run.start(run.recording(({ n }) => {
        if (n === 2 && failures++ === 0) throw new Error('a transient failure, injected')
      }))
      try {
        for (const n of [1, 2, 3]) await run.publish('k', n)
        await run.waitForApplied('k', 3)
        expect(failures).toBe(2)
        expect(await run.applied('k')).toEqual([1, 2, 3])
      } finally {
        await consumer.stop()
        await run.cleanup()
      }
    })

    it('a consumer gone while it retries event 2 (its connection closed): the next applies 2, 3, 4 in order, each once', { timeout: 90_000 }, async () => {
      const run = await scenario()
      let failing = true
      let failed!: () => void
      const secondFailed = { promise: new Promise<void>((resolve) => (failed = resolve)), resolve: () => failed() }
      const first = await run.start(run.recording(({ n }) => {
        if (n === 2 && failing) {
          secondFailed.resolve()
          throw new Error('failing until the consumer is gone')
        }
      }))
      try {
        for (const n of [1, 2, 3]) await run.publish('k', n)
        await secondFailed.promise
        await first.drop()
        failing = false
        // Published after the first consumer is gone, before the next starts.
        await run.publish('k', 4)
        const second = await run.start(run.recording(() => undefined))
        try {
          await run.waitForApplied('k', 4)
          expect(await run.applied('k')).toEqual([1, 2, 3, 4])
        } finally {
          await second.stop()
        }
      } finally {
        await first.stop().catch(() => undefined)
        await run.cleanup()
      }
    })

    it('a poison event 2 (failing every time): tried maxDeliver times in all, then set aside as before, and 3 follows', { timeout: 90_000 }, async () => {
      const run = await scenario()
      let failures = 0
      const consumer = await run.start(run.recording(({ n }) => {
        if (n === 2) {
          failures++
          throw new Error('a poison event, injected')
        }
      }), 3)
      try {
        for (const n of [1, 2, 3]) await run.publish('k', n)
        await run.waitForApplied('k', 2)
        expect(await run.applied('k')).toEqual([1, 3])
        expect(failures).toBe(3)
        if (broker === 'rabbitmq') await waitUntil('event 2 is dead-lettered', async () => (await run.deadLetters()) === 1)
      } finally {
        await consumer.stop()
        await run.cleanup()
      }
    })

    // JetStream only: a durable consumer made before issue 22 (JetStream's max_ack_pending, 1000).
    if (broker === 'nats') it('an existing durable consumer is brought to one message out at a time', { timeout: 90_000 }, async () => {
      const run = await scenario()
      const connection = await natsConnect({ servers: url })
      try {
        const jsm = await jetstreamManager(connection)
        await jsm.consumers.add('ONCELY_EVENTS', { durable_name: run.name, ack_policy: AckPolicy.Explicit, max_deliver: 5, filter_subject: `oncely.events.${run.type}` })
        expect((await jsm.consumers.info('ONCELY_EVENTS', run.name)).config.max_ack_pending).toBe(1000)
        const consumer = await run.start(run.recording(() => undefined))
        await consumer.stop()
        expect((await jsm.consumers.info('ONCELY_EVENTS', run.name)).config.max_ack_pending).toBe(1)
      } finally {
        await connection.close()
        await run.cleanup()
      }
    })

    // JetStream only: RabbitMQ has no ack wait to outlast (a held delivery stays with its channel).
    if (broker === 'nats') it('event 2 held in hand longer than the ack wait is not redelivered meanwhile (working())', { timeout: 90_000 }, async () => {
      const run = await scenario()
      let failures = 0
      // Two retry delays of at least 2 s each (equal jitter: half the cap or more): held over 4 s,
      // twice the ack wait.
      const consumer = await run.start(run.recording(({ n }) => {
        if (n === 2 && failures++ < 2) throw new Error('a transient failure, injected')
      }), 5, 4000)
      try {
        for (const n of [1, 2, 3]) await run.publish('k', n)
        await run.waitForApplied('k', 3)
        expect(await run.applied('k')).toEqual([1, 2, 3])
        expect(failures).toBe(3)
        // Three deliveries, one each: a redelivery of event 2 would have made it four.
        expect(await run.deliveries()).toBe(3)
      } finally {
        await consumer.stop()
        await run.cleanup()
      }
    })

    it('two instances of one consumer at once, event 2 failing once: applied 1 to 6 in order, each once', { timeout: 90_000 }, async () => {
      const run = await scenario()
      let failures = 0
      const handler = run.recording(({ n }) => {
        if (n === 2 && failures++ === 0) throw new Error('a transient failure, injected')
      })
      const instances = [await run.start(handler), await run.start(handler)]
      try {
        for (const n of [1, 2, 3, 4, 5, 6]) await run.publish('k', n)
        await run.waitForApplied('k', 6)
        expect(failures).toBe(2)
        expect(await run.applied('k')).toEqual([1, 2, 3, 4, 5, 6])
      } finally {
        for (const instance of instances) await instance.stop()
        await run.cleanup()
      }
    })
  })
}
