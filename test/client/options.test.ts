import { describe, expect, it } from 'vitest'
import { createClient, isOncelyError, memoryKeyStore, processKeyStore, type ClientOptions } from '../../src/client/index.js'
import { DEFAULT_STALE_AFTER_MS } from '../../src/engine/options.js'

function invalidOptionName(options: unknown): string {
  try {
    createClient(options as ClientOptions)
  } catch (error) {
    if (isOncelyError(error, 'ONCELY_INVALID_OPTION')) return error.message
    throw error
  }
  throw new Error('no error')
}

describe('client options', () => {
  it('are resolved with their documented defaults and frozen', () => {
    const client = createClient({ baseUrl: 'http://127.0.0.1:3000/api/' })
    const { options } = client
    expect(options).toMatchObject({
      baseUrl: 'http://127.0.0.1:3000/api',
      headers: {},
      maxAttempts: Infinity,
      baseDelayMs: 100,
      maxDelayMs: 10_000,
      maxRetryAfterMs: 60_000,
      deadlineMs: 150_000,
      attemptTimeoutMs: 30_000,
      keyTtlMs: 86_400_000,
      onRetry: undefined,
    })
    expect(options.keyStore).toBe(processKeyStore())
    expect(Object.isFrozen(options)).toBe(true)
    expect(Object.isFrozen(options.headers)).toBe(true)
    expect(Object.isFrozen(client)).toBe(true)
  })

  it('the default budget is a deadline that outlasts a crash recovery on a server with default options, not a count', () => {
    const { options } = createClient({ baseUrl: 'http://127.0.0.1:3000' })
    // Issue 12 point 6: a claim whose owner died is taken over once stale (90 s by default), which
    // can be up to one lease renewal (a third of it) after the owner's last renewal.
    expect(options.deadlineMs).toBeGreaterThanOrEqual(DEFAULT_STALE_AFTER_MS + DEFAULT_STALE_AFTER_MS / 3)
    expect(options.maxAttempts).toBe(Infinity)
  })

  it.each([
    ['baseUrl', { baseUrl: 'ftp://example.com' }],
    ['baseUrl', { baseUrl: 'not a url' }],
    ['baseUrl', { baseUrl: 'http://example.com/?q=1' }],
    ['maxAttempts', { baseUrl: 'http://x', maxAttempts: 0 }],
    ['maxAttempts', { baseUrl: 'http://x', maxAttempts: 1.5 }],
    ['baseDelayMs', { baseUrl: 'http://x', baseDelayMs: -1 }],
    ['maxDelayMs', { baseUrl: 'http://x', maxDelayMs: Number.NaN }],
    ['maxRetryAfterMs', { baseUrl: 'http://x', maxRetryAfterMs: '5' }],
    ['deadlineMs', { baseUrl: 'http://x', deadlineMs: 0 }],
    ['attemptTimeoutMs', { baseUrl: 'http://x', attemptTimeoutMs: Infinity }],
    ['keyTtlMs', { baseUrl: 'http://x', keyTtlMs: -5 }],
    ['headers', { baseUrl: 'http://x', headers: { 'Idempotency-Key': 'mine' } }],
    ['headers', { baseUrl: 'http://x', headers: { accept: 5 } }],
    ['headers', { baseUrl: 'http://x', headers: { 'bad name': 'v' } }],
    ['headers', { baseUrl: 'http://x', headers: { authorization: 'Bearer a\nb' } }],
    ['baseUrl', { baseUrl: 'http://me:pw@example.com' }],
    ['keyStore', { baseUrl: 'http://x', keyStore: { claim: () => undefined } }],
    ['onRetry', { baseUrl: 'http://x', onRetry: 'log' }],
  ])('a bad %s is refused with its name', (name, options) => {
    expect(invalidOptionName(options)).toContain(name)
  })

  // One shape for every part's options (src/option-validation.ts): the name, the rule, the value.
  it.each([
    [{ baseUrl: 'ftp://example.com' }, 'option baseUrl must be an http or https URL; got "ftp://example.com/"'],
    [{ baseUrl: 42 }, 'option baseUrl must be an http or https URL; got 42'],
    [{ baseUrl: 'http://x', maxAttempts: 0 }, 'option maxAttempts must be an integer of at least 1; got 0'],
    [{ baseUrl: 'http://x', baseDelayMs: -1 }, 'option baseDelayMs must be a number of milliseconds from 0 to 2147483647; got -1'],
    [{ baseUrl: 'http://x', maxDelayMs: Number.NaN }, 'option maxDelayMs must be a number of milliseconds from 0 to 2147483647; got NaN'],
    [{ baseUrl: 'http://x', maxRetryAfterMs: '5' }, 'option maxRetryAfterMs must be a number of milliseconds from 0 to 2147483647; got "5"'],
    [{ baseUrl: 'http://x', deadlineMs: 0 }, 'option deadlineMs must be more than 0; got 0'],
    [{ baseUrl: 'http://x', keyTtlMs: -5 }, 'option keyTtlMs must be an integer of at least 0; got -5'],
    [{ baseUrl: 'http://x', onRetry: 'log' }, 'option onRetry must be a function; got "log"'],
    [{ baseUrl: 'http://x', headers: { 'bad name': 'v' } }, 'option headers must have header names that are HTTP tokens (letters, digits and !#$%&\'*+-.^_`|~); got "bad name"'],
    [{ baseUrl: 'http://x', keyStore: { claim: () => undefined } }, 'option keyStore must have claim, finish and prune methods; got {"claim":"[function]"}'],
    [null, 'option options must be an object; got null'],
  ])('a bad option (%o) is refused as `option NAME RULE; got VALUE`', (options, message) => {
    expect(invalidOptionName(options)).toBe(message)
  })

  it('a value it may not show keeps the shape and says what it was instead', () => {
    expect(invalidOptionName({ baseUrl: 'http://x', headers: { accept: 5 } })).toBe('option headers must map header accept to a string; got a number (not shown)')
    expect(invalidOptionName({ baseUrl: 'not a url' })).toBe('option baseUrl must be an http or https URL; got a string that is not a URL (not shown)')
  })

  it('never shows a header value or a URL credential in its message', () => {
    expect(invalidOptionName({ baseUrl: 'http://x', headers: { authorization: 'Bearer sk_live_1\r\n' } })).not.toContain('sk_live_1')
    expect(invalidOptionName({ baseUrl: 'http://x', headers: { 'x-api-key': 'sk_live_2\u0100' } })).not.toContain('sk_live_2')
    expect(invalidOptionName({ baseUrl: 'http://me:sk_live_3@example.com' })).not.toContain('sk_live_3')
  })

  it('accepts an unlimited deadline and a key store of its own', () => {
    const keyStore = memoryKeyStore()
    const { options } = createClient({ baseUrl: 'https://example.com', deadlineMs: Infinity, keyStore })
    expect(options.deadlineMs).toBe(Infinity)
    expect(options.keyStore).toBe(keyStore)
  })

  it('refuses a bad call before sending: relative path, operationId on GET', async () => {
    const client = createClient({ baseUrl: 'http://127.0.0.1:1' })
    await expect(client.post('v1/charges', {})).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining('path') as unknown })
    await expect(client.request('GET', '/v1/charges', { operationId: 'x' })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining('operationId') as unknown })
    await expect(client.post('/v1/charges', {}, { operationId: '' })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION' })
  })
})
