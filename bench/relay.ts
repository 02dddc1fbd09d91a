/**
 * The relay's benchmark (issue 9), runnable on its own:
 *
 *   node --import tsx bench/relay.ts [--events N] [--writers N] [--events-url nats://…]
 *
 * 1. Drain throughput: N events (default 2000) already committed, one relay started, events/s
 *    until the consumer has them all.
 * 2. End-to-end latency, commit to consumer, p50/p99: writers commit N events while the relay
 *    runs, with the LISTEN wake-up (NOTIFY coalesced as the outbox does by default) and with
 *    polling alone (every 500 ms), printed beside each other, with the relay's claims per event
 *    (its batches: each a claim transaction and a mark).
 * 2b. A steady stream (500 events/s), published to the broker and taken in process (as the
 *    reference service's log publisher does): the relay's claims per event, commit to consumer,
 *    and the CPU per event of this process, where the writers and the relay run.
 * 2c. The relay's database CPU as the outbox grows: the steady stream again, taken in process,
 *    for `--growth-rounds` rounds (default 4) of `--growth-seconds` each (default 15), the relay on
 *    a pool of its own; per round, the CPU its PostgreSQL backends used per event and the rows
 *    the outbox held (issue 21: a plan kept from when the outbox was small read every kept event
 *    at every batch, so this grew round after round).
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
import { createJetStreamPublisher, createOutbox, createRelay, type Publisher, type Relay } from '../src/outbox/index.js'
import { migrate, withTransaction } from '../src/store/postgres/index.js'
import { openBenchDatabase } from './database.js'
import { processCpuMs } from './processes.js'
import { percentile } from './stats.js'

const { values } = parseArgs({ options: { events: { type: 'string', default: '2000' }, writers: { type: 'string', default: '8' }, 'events-url': { type: 'string' }, seconds: { type: 'string', default: '3' }, 'growth-rounds': { type: 'string', default: '4' }, 'growth-seconds': { type: 'string', default: '15' } } })
const EVENTS = Number(values.events)
const WRITERS = Number(values.writers)
const SECONDS = Number(values.seconds)
const natsUrl = values['events-url'] ?? process.env.EVENTS_URL ?? 'nats://127.0.0.1:4222'
const POLL_MS = 500
/** The steady stream's rate: well under what the writers can commit, so the relay's pace shows. */
const STEADY_RATE = 500

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
const relayWith = (listen: boolean, to: Publisher = publisher): Relay => createRelay({ pool, publisher: to, listen, pollIntervalMs: POLL_MS, batchSize: 200, maxInFlight: 32, log: () => undefined })
/**
 * Takes each event in this process, as the reference service's log publisher does when no broker
 * is set: a publish costs next to nothing, so the relay's own claims are what its CPU is made of.
 */
const inProcess: Publisher = {
  name: 'in-process',
  async publish(message) {
    if (!received.has(message.id)) received.set(message.id, performance.now())
    if (waiting && received.size >= waiting.count) waiting.resolve()
  },
  async close() {},
}

/**
 * `write(n)` for n from 0 to `total` - 1, STEADY_RATE a second in all, by WRITERS writers: each
 * takes the next n and waits for its time to come, as a service's completions arrive under load.
 */
async function steadyWrites(total: number, write: (n: number) => Promise<void>): Promise<void> {
  const started = performance.now()
  let next = 0
  await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      for (let n = next++; n < total; n = next++) {
        const wait = started + (n * 1000) / STEADY_RATE - performance.now()
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
        await write(n)
      }
    }),
  )
}

/**
 * A steady stream for `rounds` rounds of `seconds` each, taken in process by a relay on a pool of
 * its own (its batches, and its LISTEN connection), in a schema of its own that starts empty: per
 * round, what the relay's PostgreSQL backends used per event published (from /proc), and the
 * outbox's rows at the round's end.
 */
async function relayAsOutboxGrows(rounds: number, seconds: number): Promise<Array<{ round: number; events: number; microsPerEvent: number; rows: number }>> {
  const schema = 'oncely_bench_growth'
  const applicationName = 'oncely-bench-growth-relay'
  await migrate({ pool, schema })
  const relayPool = new pg.Pool({ connectionString: database.url, max: 2, application_name: applicationName })
  let published = 0
  const counting: Publisher = {
    name: 'counting',
    async publish() {
      published++
    },
    async close() {},
  }
  const relay = createRelay({ pool: relayPool, schema, publisher: counting, log: () => undefined })
  const outbox = createOutbox({ schema })
  const relayCpuMs = async () => {
    const { rows } = await pool.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [applicationName])
    const each = await Promise.all(rows.map(({ pid }) => processCpuMs(pid).catch(() => 0)))
    return each.reduce((sum, ms) => sum + ms, 0)
  }
  const results: Array<{ round: number; events: number; microsPerEvent: number; rows: number }> = []
  await relay.start()
  try {
    let written = 0
    for (let round = 1; round <= rounds; round++) {
      // The backends of the round's start: one the pool opens during the round adds from zero.
      const cpuBefore = await relayCpuMs()
      const publishedBefore = published
      const total = STEADY_RATE * seconds
      await steadyWrites(total, async (n) => {
        await withTransaction(pool, (tx) => outbox.enqueue(tx, { type: 'event.bench', key: `k${(written + n) % 50}`, payload: { n } }))
      })
      written += total
      while (published < written) await new Promise((resolve) => setTimeout(resolve, 10))
      const events = published - publishedBefore
      const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.outbox`)
      results.push({ round, events, microsPerEvent: (((await relayCpuMs()) - cpuBefore) * 1000) / events, rows: rows[0]?.n ?? 0 })
    }
  } finally {
    await relay.stop()
    await relayPool.end()
  }
  return results
}

/**
 * Counts `relay`'s claims (its batches), each a claim transaction and a mark on the pool: under a
 * stream of writers, what the relay costs the process it runs in goes with them (issue 21).
 */
function countClaims(relay: Relay): () => number {
  let claims = 0
  const runOnce = relay.runOnce.bind(relay)
  relay.runOnce = () => {
    claims++
    return runOnce()
  }
  return () => claims
}

/** p50 and p99 of commit to consumer (ms) over `commits` (event id → when it committed). */
function commitToConsumer(commits: ReadonlyMap<string, number>): { p50: number; p99: number } {
  const delays = [...commits].map(([id, at]) => (received.get(id) ?? Number.NaN) - at).filter(Number.isFinite)
  return { p50: percentile(delays, 50), p99: percentile(delays, 99) }
}

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
    const claims = countClaims(relay)
    await relay.start()
    const commits = new Map<string, number>()
    await write(EVENTS, listen, commits)
    await allReceived(EVENTS)
    await relay.stop()
    return { ...commitToConsumer(commits), claimsPerEvent: claims() / EVENTS }
  }
  const listening = await latency(true)
  const polling = await latency(false)
  const row = (name: string, figures: Awaited<ReturnType<typeof latency>>) => `${name.padEnd(24)} ${figures.p50.toFixed(1).padStart(8)} ${figures.p99.toFixed(1).padStart(8)} ${figures.claimsPerEvent.toFixed(3).padStart(14)}`
  lines.push('', 'commit to consumer (ms)       p50      p99   claims/event', row('LISTEN/NOTIFY wake-up', listening), row(`polling alone (${POLL_MS} ms)`, polling))

  // 2b. A steady stream: the writers commit STEADY_RATE events a second in all for SECONDS (each
  // its own transaction, NOTIFY coalesced), as a service's completions do under load; the relay
  // runs in this process, as in the reference service, so the CPU per event is the writers' and
  // the relay's together (issue 21: how often the relay claims is what changes it).
  const steady = async (to: Publisher) => {
    received.clear()
    const relay = relayWith(true, to)
    const claims = countClaims(relay)
    await relay.start()
    const outbox = createOutbox()
    const commits = new Map<string, number>()
    const cpu = process.cpuUsage()
    await steadyWrites(STEADY_RATE * SECONDS, async (n) => {
      const { id } = await withTransaction(pool, (tx) => outbox.enqueue(tx, { type: 'event.bench', key: `k${n % 50}`, payload: { n } }))
      commits.set(id, performance.now())
    })
    await allReceived(commits.size)
    const used = process.cpuUsage(cpu)
    await relay.stop()
    return { claimsPerEvent: claims() / commits.size, ...commitToConsumer(commits), cpuMsPerEvent: (used.user + used.system) / 1000 / commits.size }
  }
  lines.push('', `a steady stream, ${STEADY_RATE} events/s for ${SECONDS} s (${WRITERS} writers, 50 ordering keys)   claims/event   p50 ms   p99 ms   CPU ms/event (writers and relay)`)
  for (const to of [publisher, inProcess]) {
    const stream = await steady(to)
    lines.push(`published to ${to.name.padEnd(12)} ${stream.claimsPerEvent.toFixed(3).padStart(51)} ${stream.p50.toFixed(1).padStart(8)} ${stream.p99.toFixed(1).padStart(8)} ${stream.cpuMsPerEvent.toFixed(3).padStart(14)}`)
  }

  // 2c. The relay's database CPU as the outbox grows.
  const growthRounds = Number(values['growth-rounds'])
  const growthSeconds = Number(values['growth-seconds'])
  lines.push('', `the relay's PostgreSQL CPU as the outbox grows, ${STEADY_RATE} events/s taken in process, ${growthRounds} rounds of ${growthSeconds} s   events   µs/event   outbox rows`)
  for (const round of await relayAsOutboxGrows(growthRounds, growthSeconds)) {
    lines.push(`round ${String(round.round).padEnd(96)} ${String(round.events).padStart(6)} ${round.microsPerEvent.toFixed(0).padStart(10)} ${String(round.rows).padStart(13)}`)
  }

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
  // An idle connection still closing when the database is dropped reports its termination to the
  // pool (seen in some runs, before this file counted claims too); nothing runs by then.
  pool.on('error', () => undefined)
  await pool.end()
  await database.close()
}
