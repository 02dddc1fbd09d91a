import { afterAll, beforeAll } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js'
import { startProvider, startService, type ServiceOptions, type TestProcess } from '../../helpers/processes.js'
import { startGate, type Gate } from './gate.js'

export interface ServiceFixtureOptions {
  /** The fake provider's settings. (Default: `startProvider`'s) */
  provider?: Parameters<typeof startProvider>[0]
  /** Puts the recording gate between the service and the provider. (Default: false) */
  gate?: boolean
  /** The service's settings besides its database and provider. (Default: the service's own) */
  service?: Omit<ServiceOptions, 'databaseUrl' | 'schema' | 'providerUrl'>
  /** How long starting them all may take. (Default: vitest's hook timeout) */
  startTimeoutMs?: number
}

/** The running reference service of one test file; each part is there from `beforeAll` on. */
export interface ServiceFixture {
  readonly db: TestDatabase
  readonly provider: TestProcess
  /** The gate in front of the provider; only with `gate: true`. */
  readonly gate: Gate
  readonly service: TestProcess
  /** The service's `http://HOST:PORT`. */
  readonly api: string
}

/**
 * The reference service as a user runs it, for the tests of one file: a database of the file's
 * own, the fake provider process (behind the gate, if asked) and the service process, started in
 * `beforeAll` and stopped in `afterAll`, in reverse order.
 */
export function useService(options: ServiceFixtureOptions = {}): ServiceFixture {
  let db: TestDatabase | undefined
  let provider: TestProcess | undefined
  let gate: Gate | undefined
  let service: TestProcess | undefined
  beforeAll(async () => {
    db = await createTestDatabase()
    provider = await startProvider(options.provider)
    if (options.gate === true) gate = await startGate(provider.url)
    service = await startService({ ...options.service, databaseUrl: db.url, schema: db.schema, providerUrl: gate?.url ?? provider.url })
  }, options.startTimeoutMs)
  afterAll(async () => {
    await service?.stop()
    await gate?.close()
    await provider?.stop()
    await db?.close()
  })
  const started = <T>(part: T | undefined, name: string): T => {
    if (part === undefined) throw new Error(`useService: the ${name} is there only inside tests${name === 'gate' ? ', and only with gate: true' : ''}`)
    return part
  }
  return {
    get db() {
      return started(db, 'database')
    },
    get provider() {
      return started(provider, 'provider')
    },
    get gate() {
      return started(gate, 'gate')
    },
    get service() {
      return started(service, 'service')
    },
    get api() {
      return started(service, 'service').url
    },
  }
}
