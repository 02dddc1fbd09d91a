import type { ChannelModel, ConfirmChannel } from 'amqplib'
import { OncelyError } from '../../errors.js'
import { invalid, positiveInteger } from '../../option-validation.js'
import type { Publisher } from '../publisher.js'

export interface RabbitMqPublisherOptions {
  /** `amqp://USER:PASS@HOST:PORT`. (Default: none, required) */
  url: string
  /** The durable topic exchange events go to, declared if absent. (Default: `oncely.events`) */
  exchange?: string
  /** How long to wait for the broker's confirm. (Default: 5000) */
  timeoutMs?: number
}

interface Session {
  connection: ChannelModel
  channel: ConfirmChannel
  /** Event ids the broker returned (no queue took them), until their confirm arrives. */
  returned: Set<string>
}

/**
 * Publishes to a RabbitMQ topic exchange with publisher confirms, `persistent`, `message_id` =
 * the event id and the event type as routing key. `mandatory` is set and a returned message is
 * a failure: a confirm alone also acknowledges a message no queue took. Needs the optional peer
 * dependency `amqplib`.
 *
 * @example
 * ```ts
 * import { createRabbitMqPublisher, createRelay } from 'oncely/outbox'
 * const relay = createRelay({ pool, publisher: createRabbitMqPublisher({ url: 'amqp://guest:guest@127.0.0.1:5672' }) })
 * ```
 */
export function createRabbitMqPublisher(options: RabbitMqPublisherOptions): Publisher {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'must be an object', options)
  if (typeof options.url !== 'string' || !/^amqps?:\/\//.test(options.url)) {
    // A URL of another scheme may still carry credentials: shown without them.
    throw invalid('url', 'must be an amqp:// or amqps:// URL', typeof options.url === 'string' ? options.url.replace(/\/\/[^@/]*@/, '//***@') : options.url)
  }
  const exchange = options.exchange ?? 'oncely.events'
  const timeoutMs = positiveInteger('timeoutMs', options.timeoutMs ?? 5000)
  const where = redact(options.url)
  let session: Promise<Session> | undefined

  const open = () => {
    session ??= (async () => {
      const amqp = await import('amqplib')
      const connection = await amqp.connect(options.url, { timeout: timeoutMs })
      const opened = session
      const forget = () => {
        if (session === opened) session = undefined
      }
      connection.on('error', forget)
      connection.on('close', forget)
      const channel = await connection.createConfirmChannel()
      channel.on('error', forget)
      channel.on('close', forget)
      await channel.assertExchange(exchange, 'topic', { durable: true })
      const returned = new Set<string>()
      channel.on('return', (message: { properties: { messageId?: unknown } }) => {
        if (typeof message.properties.messageId === 'string') returned.add(message.properties.messageId)
      })
      return { connection, channel, returned }
    })().catch((error: unknown) => {
      session = undefined
      throw failure(`cannot connect to ${where}`, error)
    })
    return session
  }

  return {
    name: 'rabbitmq',
    async publish(message) {
      const { channel, returned } = await open()
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(failure(`event ${message.id} not confirmed within ${timeoutMs} ms`, undefined)), timeoutMs)
        const settle = (error: unknown) => {
          clearTimeout(timer)
          // The broker sends basic.return before the confirm of the same message.
          const wasReturned = returned.delete(message.id)
          if (error) reject(failure(`event ${message.id} refused by the broker (nack)`, error))
          else if (wasReturned) reject(failure(`event ${message.id} was returned: no queue is bound to ${exchange} for routing key ${message.type}`, undefined))
          else resolve()
        }
        try {
          channel.publish(
            exchange,
            message.type,
            message.body,
            {
              persistent: true,
              mandatory: true,
              messageId: message.id,
              type: message.type,
              contentType: message.headers['content-type'] ?? 'application/json',
              timestamp: Math.floor(message.occurredAt.getTime() / 1000),
              headers: { ...message.headers },
            },
            settle,
          )
        } catch (error) {
          clearTimeout(timer)
          reject(failure(`event ${message.id} could not be sent`, error))
        }
      })
    },
    async close() {
      const current = session
      session = undefined
      if (!current) return
      const opened = await current.catch(() => undefined)
      await opened?.connection.close().catch(() => undefined)
    },
  }
}

function failure(what: string, cause: unknown): OncelyError {
  const detail = cause === undefined ? '' : `: ${cause instanceof Error ? cause.message : JSON.stringify(cause)}`
  return new OncelyError('ONCELY_PUBLISH_FAILED', `rabbitmq: ${what}${detail}`, cause === undefined ? undefined : { cause })
}

/** The URL without its password, for messages. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = '***'
    return parsed.toString()
  } catch {
    return 'the broker'
  }
}
