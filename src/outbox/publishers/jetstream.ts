import type { NatsConnection } from '@nats-io/transport-node'
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream'
import { OncelyError } from '../../errors.js'
import { invalid, positiveInteger } from '../../option-validation.js'
import type { Publisher } from '../publisher.js'

export interface JetStreamPublisherOptions {
  /** `nats://HOST:PORT`, or several. Ignored when `connection` is given. (Default: none, required without `connection`) */
  servers?: string | string[]
  /** Your own connection; the publisher then never closes it. (Default: one of its own, reconnecting forever) */
  connection?: NatsConnection
  /** The stream events go to, created if absent. (Default: `ONCELY_EVENTS`) */
  stream?: string
  /** Subjects are `<prefix>.<event type>`; the stream created takes `<prefix>.>`. (Default: `oncely.events`) */
  subjectPrefix?: string
  /** The duplicate window of a stream this publisher creates; at least the relay's retry horizon is used. (Default: 120000) */
  duplicateWindowMs?: number
  /** How long to wait for the stream's acknowledgement. (Default: 5000) */
  timeoutMs?: number
}

/**
 * Publishes to NATS JetStream with `Nats-Msg-Id` = the event id, so the stream drops a
 * duplicate inside its window; resolves on the stream's acknowledgement. Needs the optional
 * peer dependencies `@nats-io/transport-node` and `@nats-io/jetstream`.
 *
 * @example
 * ```ts
 * import { createJetStreamPublisher, createRelay } from 'oncely/outbox'
 * const relay = createRelay({ pool, publisher: createJetStreamPublisher({ servers: 'nats://127.0.0.1:4222' }) })
 * ```
 */
export function createJetStreamPublisher(options: JetStreamPublisherOptions): Publisher {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  if (options.connection === undefined && (options.servers === undefined || options.servers.length === 0)) throw invalid('servers', 'is required without a connection', options.servers)
  const stream = options.stream ?? 'ONCELY_EVENTS'
  const prefix = options.subjectPrefix ?? 'oncely.events'
  const timeoutMs = positiveInteger('timeoutMs', options.timeoutMs ?? 5000)
  const windowMs = positiveInteger('duplicateWindowMs', options.duplicateWindowMs ?? 120_000)
  let horizonMs = 0
  let session: Promise<{ nc: NatsConnection; js: JetStreamClient; jsm: JetStreamManager }> | undefined
  let streamReady: Promise<number> | undefined

  const connect = () => {
    session ??= (async () => {
      const [{ connect: natsConnect }, { jetstream, jetstreamManager }] = await Promise.all([import('@nats-io/transport-node'), import('@nats-io/jetstream')])
      const nc = options.connection ?? (await natsConnect({ servers: options.servers ?? [], name: 'oncely-relay', maxReconnectAttempts: -1, reconnectTimeWait: 250, timeout: timeoutMs }))
      return { nc, js: jetstream(nc, { timeout: timeoutMs }), jsm: await jetstreamManager(nc, { timeout: timeoutMs }) }
    })().catch((error: unknown) => {
      session = undefined
      throw failure(`cannot connect to ${String(options.servers)}`, error)
    })
    return session
  }

  /** Ensures the stream exists; resolves to its duplicate window in ms. */
  const ensureStream = () => {
    streamReady ??= (async () => {
      const { jsm } = await connect()
      const { nanos, millis } = await import('@nats-io/transport-node')
      const read = async () => millis((await jsm.streams.info(stream)).config.duplicate_window)
      try {
        return await read()
      } catch (error) {
        if ((error as { name?: string }).name !== 'StreamNotFoundError') throw error
      }
      try {
        await jsm.streams.add({ name: stream, subjects: [`${prefix}.>`], duplicate_window: nanos(Math.max(windowMs, horizonMs)) })
      } catch {
        // Another relay created it at the same moment: read what it made.
      }
      return read()
    })().catch((error: unknown) => {
      streamReady = undefined
      throw failure(`cannot find or create stream ${stream}`, error)
    })
    return streamReady
  }

  return {
    name: 'nats',
    async checkDedupeWindow(retryHorizonMs, warn) {
      horizonMs = retryHorizonMs
      const window = await ensureStream()
      if (window < retryHorizonMs) {
        warn(
          `oncely relay: stream ${stream} drops duplicates over ${window} ms, but the relay may publish an event again up to ${retryHorizonMs} ms later (lease and backoff): consumers must dedupe (the inbox does), or raise duplicate_window`,
        )
      }
    },
    async publish(message) {
      const { js } = await connect()
      await ensureStream()
      const { headers } = await import('@nats-io/transport-node')
      const sent = headers()
      for (const [name, value] of Object.entries(message.headers)) sent.set(name, value)
      try {
        await js.publish(`${prefix}.${message.type}`, message.body, { msgID: message.id, headers: sent, timeout: timeoutMs })
      } catch (error) {
        throw failure(`event ${message.id} not acknowledged by stream ${stream}`, error)
      }
    },
    async close() {
      const current = session
      session = undefined
      streamReady = undefined
      if (!current || options.connection) return
      const { nc } = await current.catch(() => ({ nc: undefined }))
      await nc?.drain().catch(() => nc.close())
    },
  }
}

function failure(what: string, cause: unknown): OncelyError {
  return new OncelyError('ONCELY_PUBLISH_FAILED', `nats: ${what}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause })
}
