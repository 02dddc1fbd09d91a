import type { PoolClientLike, PoolLike } from './executor.js'
import { buildListenStatements } from './statements-outbox.js'

/** A checked-out `pg` client: it emits notifications and errors. */
interface ListeningClient extends PoolClientLike {
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): unknown
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown
  removeAllListeners?(event?: string): unknown
}

const RECONNECT_BASE_MS = 250
const RECONNECT_MAX_MS = 30_000

/** What a listener tells its owner besides each notification's payload. */
export interface WakeUpHooks {
  /** The connection is listening; `reconnected` after a loss (what was sent meanwhile was missed). */
  connected?: (reconnected: boolean) => void
  /** The connection was lost; a reconnect is scheduled. */
  lost?: () => void
}

/**
 * LISTEN on a dedicated connection (docs/conventions.md, SQL): a hint that wakes its owner (the
 * relay, the store's waiting duplicates) early, never the truth, which is the poll. Reconnects by
 * itself with capped, jittered backoff, and wakes its owner after every (re)connect so what was
 * committed while it was away is read at once.
 */
export class WakeUpListener {
  readonly #pool: PoolLike
  readonly #channel: string
  readonly #sql: { listen: string; unlisten: string }
  readonly #wake: (payload: string) => void
  readonly #log: (line: string) => void
  readonly #label: string
  readonly #hooks: WakeUpHooks
  #client: ListeningClient | undefined
  #stopped = false
  #failures = 0
  #retry: NodeJS.Timeout | undefined
  /** Connections made so far (for tests and diagnostics). */
  connections = 0

  constructor(pool: PoolLike, channel: string, wake: (payload: string) => void, log: (line: string) => void, label = 'oncely relay', hooks: WakeUpHooks = {}) {
    this.#pool = pool
    this.#channel = channel
    this.#sql = buildListenStatements(channel)
    this.#wake = wake
    this.#log = log
    this.#label = label
    this.#hooks = hooks
  }

  /** True while the connection is listening. */
  get listening(): boolean {
    return this.#client !== undefined
  }

  start(): void {
    void this.#connect()
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return
    let client: ListeningClient | undefined
    try {
      client = (await this.#pool.connect()) as ListeningClient
      if (typeof client.on !== 'function') {
        client.release()
        this.#log(`${this.#label}: the pool's clients emit no notifications; relying on polling alone`)
        return
      }
      client.on('notification', (message) => {
        if (message.channel === this.#channel) this.#wake(message.payload ?? '')
      })
      client.on('error', (error) => this.#lost(client, error))
      client.on('end', () => this.#lost(client, undefined))
      await client.query({ text: this.#sql.listen })
      if (this.#stopped) {
        client.release(true)
        return
      }
      this.#client = client
      this.#failures = 0
      this.connections++
      this.#hooks.connected?.(this.connections > 1)
      this.#wake('')
    } catch (error) {
      this.#lost(client, error as Error)
    }
  }

  #lost(client: ListeningClient | undefined, error: Error | undefined): void {
    if (client !== undefined && this.#client !== undefined && client !== this.#client) return
    if (client !== undefined) {
      this.#client = undefined
      try {
        client.release(error ?? true)
      } catch {
        // Released already by an earlier error event of the same connection.
      }
    }
    if (this.#stopped || this.#retry !== undefined) return
    this.#hooks.lost?.()
    this.#failures++
    const cap = Math.min(RECONNECT_MAX_MS, RECONNECT_BASE_MS * 2 ** Math.min(this.#failures - 1, 16))
    const delay = Math.round(cap / 2 + (Math.random() * cap) / 2)
    this.#log(`${this.#label}: the LISTEN connection was lost (${error?.message ?? 'closed'}); reconnecting in ${delay} ms, polling meanwhile`)
    this.#retry = setTimeout(() => {
      this.#retry = undefined
      void this.#connect()
    }, delay)
    this.#retry.unref()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#retry)
    const client = this.#client
    this.#client = undefined
    if (client) {
      client.removeAllListeners?.('notification')
      try {
        await client.query({ text: this.#sql.unlisten })
        client.release()
      } catch (error) {
        client.release(error as Error)
      }
    }
  }
}
