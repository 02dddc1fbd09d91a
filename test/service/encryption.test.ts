import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { resolveServiceConfig, ConfigError } from '../../src/reference-service/config.js'
import { keyTable } from '../helpers/engine.js'
import { providerCharges } from '../helpers/processes.js'
import { charge, newUser, post } from './support/api.js'
import { useService } from './support/service-fixture.js'

// The reference service with ONCELY_ENCRYPTION_KEYS (issue 23): its stored responses and step
// results are not in clear in PostgreSQL, and replays are the first answer, byte for byte.
const keyA = randomBytes(32).toString('base64')
const world = useService({ service: { env: { ONCELY_ENCRYPTION_KEYS: `A:${keyA}` } }, startTimeoutMs: 180_000 })

describe('the reference service, encrypted at rest', () => {
  it('stores the charge encrypted and replays it verbatim', async () => {
    const user = newUser()
    const first = await post(world.service.url, { user, key: 'enc-1', body: charge('cus_enc_secret', 1234) })
    expect(first.status).toBe(201)
    const again = await post(world.service.url, { user, key: 'enc-1', body: charge('cus_enc_secret', 1234) })
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(again.text).toBe(first.text)
    expect(await providerCharges(world.provider.url, user)).toHaveLength(1)
    const { rows } = await world.db.pool.query<{ body: Buffer; phases: unknown }>(`SELECT response_body AS body, step_results AS phases FROM ${keyTable(world.db)} WHERE scope = $1 AND key = 'enc-1'`, [user])
    expect(rows).toHaveLength(1)
    expect(rows[0]?.body.includes('cus_enc_secret')).toBe(false)
    expect(JSON.stringify(rows[0]?.phases)).not.toContain('cus_enc_secret')
    // Since the receipt is sent after the completion (issue 21), the charge step's result never
    // commits on its own, so the completed row holds none; any it holds must be sealed. Sealed step
    // results are proven by test/engine/encryption.test.ts.
    expect(Object.values((rows[0]?.phases ?? {}) as Record<string, unknown>).filter((value) => !/^oncely:enc:v1:A:/.test(String(value)))).toEqual([])
  })

  it('a bad key is refused before the start, naming the variable and never showing the key', () => {
    const refusal = (env: Record<string, string>) => {
      try {
        resolveServiceConfig(env)
      } catch (error) {
        if (error instanceof ConfigError) return error.message
        throw error
      }
      return 'no error'
    }
    expect(refusal({ ONCELY_ENCRYPTION_KEYS: 'A:c2hvcnQ=' })).toBe('ONCELY_ENCRYPTION_KEYS: the key "A" must be 32 bytes of base64 (openssl rand -base64 32); got 5 bytes (not shown)')
    expect(refusal({ ONCELY_ENCRYPTION_KEYS: `A:${keyA}`, ONCELY_ENCRYPTION_CURRENT: 'B' })).toBe('ONCELY_ENCRYPTION_CURRENT must be one of the ids in ONCELY_ENCRYPTION_KEYS; got "B"')
    expect(refusal({ ONCELY_ENCRYPTION_CURRENT: 'A' })).toBe('ONCELY_ENCRYPTION_CURRENT is set but ONCELY_ENCRYPTION_KEYS is not')
    expect(resolveServiceConfig({ ONCELY_ENCRYPTION_KEYS: `A:${keyA},B:${keyA}` }).encryption?.current).toBe('B')
  })
})
