/**
 * The relay's benchmark (issue 9), runnable on its own:
 *
 *   node --import tsx bench/relay.ts [--events N] [--writers N] [--events-url nats://…]
 *
 * 1. Drain throughput: N events (default 2000) already committed, one relay started, events/s
 *    until the consumer has them all.
 * 2. End-to-end latency, commit to consumer, p50/p99: writers commit N events while the relay
 *    runs, with the LISTEN wake-up (NOTIFY in each transaction) and with polling alone (every
 *    500 ms), printed beside each other.
 * 3. The cost of NOTIFY on commits: completion-shaped transactions per second, with and without
 *    it (a NOTIFY takes a database-wide lock at commit).
 *
 * The broker is NATS JetStream (`--events-url`, else `nats://127.0.0.1:4222`) on a stream of
 * the benchmark's own (`ONCELY_BENCH`, subjects `oncely.bench.>`); the consumer is a plain NATS
 * subscription. `DATABASE_URL` picks the PostgreSQL (a database of the run's own), else embedded.
 */
import { parseArgs } from 'node:util'
import { connect } from '@nats-io/transport-node'
import pg from 'pg'
import { createJetStreamPublisher, createOutbox, createRelay, type Relay } from '../src/outbox/index.js'
import { migrate, withTransaction } from '../src/store/postgres/index.js'
import { openBenchDatabase } from './database.js'
import { percentile } from './stats.js'

const { values } = parseArgs({ options: { events: { type: 'string', default: '2000' }, writers: { type: 'string', default: '8' }, 'events-url': { type: 'string' }, seconds: { type: 'string', default: '3' } } })
const EVENTS = Number(values.events)
const WRITERS = Number(values.writers)
const SECONDS = Number(values.seconds)
const natsUrl = values['events-url'] ?? process.env.EVENTS_URL ?? 'nats://127.0.0.1:4222'
const POLL_MS = 500

const database = await openBenchDatabase()
const pool = new pg.Pool({ connectionString: database.url, max: WRITERS + 6 })
const nc = await connect({ servers: natsUrl })
const received = new Map<string, number>()
let waiting: { count: number; resolve: () => void } | undefined
const subscription = nc.subscribe('oncely.bench.>', {
  callback: (_error, message) => {
    const id = message.headers?.get('Nats-Msg-Id')
    if (id && !received.has(id)) received.set(id, performance.now())
    if (waiting && received.size >= waiting.count) waiting.resolve()
  },
})
const allReceived = (count: number) => new Promise<void>((resolve) => (received.size >= count ? resolve() : (waiting = { count, resolve })))

const publisher = createJetStreamPublisher({ servers: natsUrl, stream: 'ONCELY_BENCH', subjectPrefix: 'oncely.bench' })
const relayWith = (listen: boolean): Relay => createRelay({ pool, publisher, listen, pollIntervalMs: POLL_MS, batchSize: 200, maxInFlight: 32, log: () => undefined })

async function write(count: number, notify: boolean, commits?: Map<string, number>): Promise<void> {
  const outbox = createOutbox({ notify })
  let next = 0
  await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      while (next < count) {
        next++
        const { id } = await withTransaction(pool, (tx) => outbox.enqueue(tx, { type: 'event.bench', key: `k${next % 50}`, payload: { n: next } }))
        commits?.set(id, performance.now())
      }
    }),
  )
}

try {
  await migrate({ pool })
  await publisher.checkDedupeWindow?.(0, () => undefined)
  const lines: string[] = []

  // 1. Drain throughput.
  await write(EVENTS, false)
  received.clear()
  const drainRelay = relayWith(false)
  const started = performance.now()
  await drainRelay.start()
  await allReceived(EVENTS)
  const drainSeconds = (performance.now() - started) / 1000
  await drainRelay.stop()
  lines.push(`drain: ${EVENTS} events in ${drainSeconds.toFixed(2)} s = ${Math.round(EVENTS / drainSeconds)} events/s (one relay, batches of 200, 32 in flight, 50 ordering keys)`)

  // 2. Latency, commit to consumer.
  const latency = async (listen: boolean) => {
    received.clear()
    const relay = relayWith(listen)
    await relay.start()
    const commits = new Map<string, number>()
    await write(EVENTS, listen, commits)
    await allReceived(EVENTS)
    await relay.stop()
    const delays = [...commits].map(([id, at]) => (received.get(id) ?? Number.NaN) - at).filter(Number.isFinite)
    return { p50: percentile(delays, 50), p99: percentile(delays, 99) }
  }
  const listening = await latency(true)
  const polling = await latency(false)
  lines.push('', 'commit to consumer (ms)       p50      p99', `LISTEN/NOTIFY wake-up    ${listening.p50.toFixed(1).padStart(8)} ${listening.p99.toFixed(1).padStart(8)}`, `polling alone (${POLL_MS} ms)   ${polling.p50.toFixed(1).padStart(8)} ${polling.p99.toFixed(1).padStart(8)}`)

  // 3. NOTIFY's cost on commits.
  const commitRate = async (notify: boolean) => {
    const outbox = createOutbox({ notify })
    const until = performance.now() + SECONDS * 1000
    let done = 0
    await Promise.all(
      Array.from({ length: WRITERS }, async () => {
        while (performance.now() < until) {
          await withTransaction(pool, async (tx) => {
            await outbox.enqueue(tx, { type: 'event.bench', payload: { done } })
            await tx.query({ text: 'SELECT 1' })
          })
          done++
        }
      }),
    )
    return done / SECONDS
  }
  const without = await commitRate(false)
  const withNotify = await commitRate(true)
  lines.push('', `completion-shaped commits/s, ${WRITERS} writers: without NOTIFY ${Math.round(without)}, with NOTIFY ${Math.round(withNotify)} (ratio ${(withNotify / without).toFixed(2)})`)
  process.stdout.write(`oncely relay bench on PostgreSQL ${database.version} (${database.where}), NATS ${natsUrl}\n\n${lines.join('\n')}\n`)
} finally {
  subscription.unsubscribe()
  await publisher.close()
  await nc.close()
  await pool.end()
  await database.close()
}
