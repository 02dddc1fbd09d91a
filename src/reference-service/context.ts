import type { Engine, Logger } from '../index.js'
import type { IdempotencyEnv } from '../adapters/hono.js'
import type { OncelyMetrics } from '../ops/metrics.js'
import type { PoolLike, Queryable } from '../store/postgres/index.js'
import type { ChargeInput } from './charge-input.js'
import type { Chaos, CrashPoint } from './chaos.js'
import type { StrategyName } from './config.js'
import type { ProviderClient } from './provider-client.js'
import type { Outbox } from '../outbox/index.js'
import type { ReceiptSender } from './receipt.js'

/** What every route of the service is built from. */
export interface ServiceDeps {
  pool: PoolLike
  engine: Engine<Queryable>
  provider: ProviderClient
  chaos: Chaos
  metrics: OncelyMetrics
  strategy: StrategyName
  /** Where a completion writes its `charge.succeeded` event. */
  outbox: Outbox
  /** Sends the customer's receipt, at most once per charge. */
  sendReceipt: ReceiptSender
  /** Structured: lines about a request carry its route, scope, hashed key and code as fields. */
  log: Logger
}

/** The Hono environment of the service: the user, the validated body, the crash point asked for. */
export interface ServiceEnv {
  Variables: IdempotencyEnv<Queryable>['Variables'] & {
    userId: string
    charge: ChargeInput
    /** The parsed body as sent, for the fingerprint of the broken strategies. */
    chargeBody: unknown
    crashPoint: CrashPoint | undefined
  }
}
