import { randomUUID } from 'node:crypto'
import { OncelyError } from '../errors.js'
import { transactionInTwoFlights } from '../store/postgres/statement-runner.js'
import { bind, type OutboxEventRow } from '../store/postgres/statements-outbox.js'
import { backoffDelayMs, retryHorizonMs } from './backoff.js'
import { toMessage } from './envelope.js'
import { createOutbox, type Outbox } from './outbox.js'
import { resolveRelayOptions, type RelayOptions, type ResolvedRelayOptions } from './relay-options.js'
import { WakeUpListener } from '../store/postgres/wake-up-listener.js'
import { pruneSentEvents } from './admin.js'

/** What one batch came to. */
export interface RelayBatchResult {
  /** Events this batch claimed. */
  claimed: number
  published: number
  /** Failed publishes, retried later with backoff. */
  failed: number
  /** Failed publishes that used their last attempt: now dead letters. */
  dead: number
}

export interface Relay {
  /** Claims one batch, publishes it, records the outcome. What `oncely relay --once` runs until the outbox is drained. */
  runOnce(): Promise<RelayBatchResult>
  /** Runs batches until `stop()`: at once while there is work, else on a notification or after the poll interval. */
  start(): Promise<void>
  /** Finishes the batch in flight, stops listening and polling; does not close the publisher. */
  stop(): Promise<void>
  /** The longest time over which one event may be published again (lease plus the whole backoff). */
  readonly retryHorizonMs: number
  /** LISTEN connections made so far. */
  readonly listenConnections: number
}

/**
 * The relay: publishes the outbox's events at least once, in commit order per ordering key.
 * Batches are claimed with `FOR UPDATE SKIP LOCKED` in short transactions and leased; several
 * relays may run at once. A relay that dies mid-batch leaves its events to be published again
 * once the lease runs out.
 *
 * @example
 * ```ts
 * import { createLogPublisher, createRelay } from 'oncely/outbox'
 * const relay = createRelay({ pool, publisher: createLogPublisher() })
 * await relay.start()
 * process.once('SIGTERM', () => void relay.stop())
 * ```
 */
export function createRelay(options: RelayOptions): Relay {
  return new OutboxRelay(resolveRelayOptions(options))
}

/** How many times the relay looks again, `followUpMs` apart, after a batch that published. */
const FOLLOW_UPS = 2

class OutboxRelay implements Relay {
  readonly #options: ResolvedRelayOptions
  readonly #outbox: Outbox
  readonly retryHorizonMs: number
  #listener: WakeUpListener | undefined
  #running: Promise<void> | undefined
  #stopped = true
  #wake: (() => void) | undefined
  #woken = false
  #lastPrune = 0

  constructor(options: ResolvedRelayOptions) {
    this.#options = options
    this.#outbox = createOutbox({ schema: options.schema, preparedStatements: options.preparedStatements })
    this.retryHorizonMs = retryHorizonMs({ baseMs: options.backoffBaseMs, maxMs: options.backoffMaxMs }, options.maxAttempts, options.leaseMs)
  }

  get listenConnections(): number {
    return this.#listener?.connections ?? 0
  }

  async start(): Promise<void> {
    if (!this.#stopped) return
    this.#stopped = false
    await this.#options.publisher.checkDedupeWindow?.(this.retryHorizonMs, this.#options.log)
    if (this.#options.listen) {
      this.#listener = new WakeUpListener(this.#options.pool, this.#outbox.channel, () => this.#wakeUp(), this.#options.log)
      this.#listener.start()
    }
    this.#running = this.#loop()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    this.#wakeUp()
    await this.#running
    this.#running = undefined
    await this.#listener?.stop()
    this.#listener = undefined
  }

  #wakeUp(): void {
    this.#woken = true
    this.#wake?.()
  }

  async #loop(): Promise<void> {
    // Looks left before the poll interval applies again: writers coalesce their NOTIFYs, so the
    // events committed just after a published batch may have woken nobody.
    let followUps = 0
    while (!this.#stopped) {
      this.#woken = false
      let full = false
      try {
        const result = await this.runOnce()
        // A full batch has more behind it: the next is claimed at once. A batch that published
        // anything may have a few behind it: they are looked for a follow-up later, or at the
        // next NOTIFY, not at once. Under a steady stream, a claim at once after every batch
        // found one or two events each time, a claim transaction and a mark for each (issue 21:
        // the relay in the reference service's process was 8 % of its instructions per fresh
        // charge); a follow-up apart, a batch takes what its writers committed meanwhile, for at
        // most `followUpMs` more on their way.
        full = result.claimed >= this.#options.batchSize
        if (full || result.published > 0) followUps = FOLLOW_UPS
        await this.#pruneWhenDue()
      } catch (error) {
        this.#options.log(`oncely relay: a batch failed, retrying at the next poll: ${(error as Error).message}`)
      }
      if (full || this.#woken || this.#stopped) continue
      if (followUps > 0) {
        followUps--
        await this.#sleep(this.#options.followUpMs)
      } else {
        await this.#sleep(this.#options.pollIntervalMs)
      }
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms)
      function done() {
        clearTimeout(timer)
        resolve()
      }
      this.#wake = () => {
        this.#wake = undefined
        done()
      }
    })
  }

  async runOnce(): Promise<RelayBatchResult> {
    const token = randomUUID()
    const rows = await this.#claim(token)
    const result: RelayBatchResult = { claimed: rows.length, published: 0, failed: 0, dead: 0 }
    if (rows.length === 0) return result
    const sent: string[] = []
    const untried: string[] = []
    const queues = orderedGroups(rows)
    const worker = async () => {
      for (let group = queues.shift(); group !== undefined; group = queues.shift()) {
        for (const [index, row] of group.entries()) {
          const error = await this.#publish(row)
          if (error === undefined) {
            sent.push(row.id)
            result.published++
            continue
          }
          // One key's events go in order: the rest of this key waits for the failed one.
          untried.push(...group.slice(index + 1).map((later) => later.id))
          result.failed++
          if (await this.#markFailed(row, token, error)) result.dead++
          break
        }
      }
    }
    // The bound on publishes in flight: one per worker, each working through whole keys.
    await Promise.all(Array.from({ length: Math.min(this.#options.maxInFlight, queues.length) }, worker))
    const { pool } = this.#options
    const sql = this.#outbox.statements
    if (sent.length > 0) await pool.query(bind(sql.markSent, [sent, token]))
    if (untried.length > 0) await pool.query(bind(sql.releaseLeases, [untried, token]))
    return result
  }

  async #claim(token: string): Promise<OutboxEventRow[]> {
    const sql = this.#outbox.statements
    const { batchSize, leaseMs } = this.#options
    // Two flights (issue 21): BEGIN with the heads, then the followers with the COMMIT.
    const [heads, followers] = await transactionInTwoFlights<OutboxEventRow>(this.#options.pool, bind(sql.claimHeads, [batchSize, token, leaseMs]), ({ rows }) => {
      const keyed = rows.filter((row) => row.ordering_key !== null)
      const room = batchSize - rows.length
      if (keyed.length === 0 || room <= 0) return undefined
      const perKey = Math.max(1, Math.floor(room / keyed.length))
      return bind(sql.claimFollowers, [keyed.map((row) => row.ordering_key), keyed.map((row) => row.seq), token, leaseMs, perKey])
    })
    return followers === undefined ? heads.rows : [...heads.rows, ...followers.rows]
  }

  /** Resolves to the error, or undefined once the broker has taken the event. */
  async #publish(row: OutboxEventRow): Promise<Error | undefined> {
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new OncelyError('ONCELY_PUBLISH_FAILED', `${this.#options.publisher.name}: not confirmed within ${this.#options.publishTimeoutMs} ms`)),
        this.#options.publishTimeoutMs,
      )
    })
    try {
      await Promise.race([this.#options.publisher.publish(toMessage(row)), timeout])
      return undefined
    } catch (error) {
      return error instanceof Error ? error : new Error(String(error))
    } finally {
      clearTimeout(timer)
    }
  }

  /** Records a failed attempt with its backoff; resolves to true when the event is now dead. */
  async #markFailed(row: OutboxEventRow, token: string, error: Error): Promise<boolean> {
    const { maxAttempts, backoffBaseMs, backoffMaxMs, pool, log } = this.#options
    const delay = backoffDelayMs({ baseMs: backoffBaseMs, maxMs: backoffMaxMs }, row.attempts)
    const { rows } = await pool.query<{ status: string }>(bind(this.#outbox.statements.markFailed, [row.id, token, maxAttempts, delay, error.message.slice(0, 2000)]))
    const dead = rows[0]?.status === 'dead'
    if (dead) log(`oncely relay: event ${row.id} (${row.type}) is dead after ${row.attempts} attempts: ${error.message}; its key waits until \`oncely outbox retry ${row.id}\``)
    return dead
  }

  async #pruneWhenDue(): Promise<void> {
    const { retentionMs, pruneIntervalMs, pool } = this.#options
    if (retentionMs === 0 || Date.now() - this.#lastPrune < pruneIntervalMs) return
    this.#lastPrune = Date.now()
    await pruneSentEvents({ pool, schema: this.#options.schema, retentionMs })
  }
}

/** Events grouped per ordering key, each group in seq order; an event with no key is a group alone. */
function orderedGroups(rows: OutboxEventRow[]): OutboxEventRow[][] {
  const byKey = new Map<string, OutboxEventRow[]>()
  const groups: OutboxEventRow[][] = []
  for (const row of [...rows].sort((a, b) => compareSeq(a.seq, b.seq))) {
    if (row.ordering_key === null) {
      groups.push([row])
      continue
    }
    let group = byKey.get(row.ordering_key)
    if (!group) {
      group = []
      byKey.set(row.ordering_key, group)
      groups.push(group)
    }
    group.push(row)
  }
  return groups
}

function compareSeq(a: string, b: string): number {
  const difference = BigInt(a) - BigInt(b)
  return difference < 0n ? -1 : difference > 0n ? 1 : 0
}
