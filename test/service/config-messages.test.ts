import { describe, expect, it } from 'vitest'
import { ConfigError, resolveServiceConfig } from '../../src/reference-service/config.js'

// Issue 12, the house: the service's settings are refused in the shape of every option's message,
// naming the environment variable (`IDEMPOTENCY_TTL_MS must be …; got …`), before anything starts;
// a secret is described and a URL's credentials are never shown.

function refusal(env: Record<string, string>): string {
  try {
    resolveServiceConfig(env)
  } catch (error) {
    if (error instanceof ConfigError) return error.message
    throw error
  }
  throw new Error('no error')
}

describe('a bad setting of the reference service is refused as `VARIABLE RULE; got VALUE`', () => {
  it.each<[string, Record<string, string>, string]>([
    [
      'a TTL alone, not above the default stale threshold: the message names the variable to set',
      { IDEMPOTENCY_TTL_MS: '1000' },
      'IDEMPOTENCY_TTL_MS must be above IDEMPOTENCY_STALE_AFTER_MS (90000 by default; for a TTL this short set IDEMPOTENCY_STALE_AFTER_MS below it as well); got 1000',
    ],
    ['a TTL not above a stale threshold that was set', { IDEMPOTENCY_TTL_MS: '1000', IDEMPOTENCY_STALE_AFTER_MS: '2000' }, 'IDEMPOTENCY_TTL_MS must be above IDEMPOTENCY_STALE_AFTER_MS (2000); got 1000'],
    ['a TTL equal to the stale threshold', { IDEMPOTENCY_TTL_MS: '5000', IDEMPOTENCY_STALE_AFTER_MS: '5000' }, 'IDEMPOTENCY_TTL_MS must be above IDEMPOTENCY_STALE_AFTER_MS (5000); got 5000'],
    ['a short cache secret', { ONCELY_CACHE_SECRET: 's3cret' }, 'ONCELY_CACHE_SECRET must be at least 16 bytes; got 6 bytes (not shown)'],
    ['a short console token', { CONSOLE_TOKEN: 's3cret' }, 'CONSOLE_TOKEN must be at least 16 characters; got 6 characters (not shown)'],
    ['an events URL of another scheme', { EVENTS_URL: 'kafka://user:s3cret@broker:9092' }, 'EVENTS_URL must be a nats:// or amqp:// URL; got "kafka://***@broker:9092"'],
    ['a Redis URL of another scheme', { REDIS_URL: 'http://:s3cret@cache:6379' }, 'REDIS_URL must be a redis or rediss URL; got "http://***@cache:6379"'],
    ['a provider URL of another scheme', { PROVIDER_URL: 'ftp://user:s3cret@provider' }, 'PROVIDER_URL must be a http or https URL; got "ftp://***@provider"'],
    ['a pretenuring switch that is not one', { ONCELY_V8_PRETENURING: 'sometimes' }, 'ONCELY_V8_PRETENURING must be 1 or 0; got "sometimes"'],
  ])('%s', (_name, env, expected) => {
    const shown = refusal(env)
    expect(shown).toBe(expected)
    expect(shown).not.toContain('s3cret')
  })
})

describe('the TTL and the stale threshold are a pair', () => {
  it('a short TTL starts once the stale threshold the refusal names is set below it', () => {
    expect(() => resolveServiceConfig({ IDEMPOTENCY_TTL_MS: '1000' })).toThrow(ConfigError)
    expect(resolveServiceConfig({ IDEMPOTENCY_TTL_MS: '1000', IDEMPOTENCY_STALE_AFTER_MS: '500' })).toMatchObject({ ttlMs: 1000, staleAfterMs: 500 })
  })
})

describe("V8's allocation-site pretenuring (issue 21)", () => {
  it('is turned off at start unless ONCELY_V8_PRETENURING keeps it', () => {
    expect(resolveServiceConfig({}).v8Pretenuring).toBe(false)
    expect(resolveServiceConfig({ ONCELY_V8_PRETENURING: '1' }).v8Pretenuring).toBe(true)
    expect(resolveServiceConfig({ ONCELY_V8_PRETENURING: '0' }).v8Pretenuring).toBe(false)
  })
})
