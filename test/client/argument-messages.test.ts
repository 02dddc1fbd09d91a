import { describe, expect, it } from 'vitest'
import { createClient, isOncelyError, memoryKeyStore, postgresKeyStore, type CallInit, type KeyStoreQueryable, type RequestBody } from '../../src/client/index.js'

// Issue 12, the house: a call's own arguments, its body and the PostgreSQL key store's db are
// refused in the one shape of every option (src/option-validation.ts): `option NAME RULE; got VALUE`.

/** The message of the ONCELY_INVALID_OPTION a call rejects with; nothing is listening, nothing is sent. */
async function refusal(method: string, path: unknown, init: CallInit = {}): Promise<string> {
  const client = createClient({ baseUrl: 'http://127.0.0.1:9', keyStore: memoryKeyStore(), maxAttempts: 1 })
  const error: unknown = await client.request(method, path as string, init).then(
    () => new Error('no error'),
    (e: unknown) => e,
  )
  if (isOncelyError(error, 'ONCELY_INVALID_OPTION')) return error.message
  throw error
}

function thrown(make: () => unknown): string {
  try {
    make()
  } catch (error) {
    if (isOncelyError(error, 'ONCELY_INVALID_OPTION')) return error.message
    throw error
  }
  throw new Error('no error')
}

const circular: Record<string, unknown> = {}
circular.self = circular

describe('a bad argument of a call is refused as `option NAME RULE; got VALUE`', () => {
  it.each([
    ['an empty operationId', 'POST', '/v1/charges', { operationId: '' }, 'option operationId must be a string of 1 to 1024 characters; got ""'],
    ['a numeric operationId', 'POST', '/v1/charges', { operationId: 42 as unknown as string }, 'option operationId must be a string of 1 to 1024 characters; got 42'],
    ['an operationId on a GET', 'GET', '/v1/charges', { operationId: 'op-1' }, 'option operationId must be left out of GET requests, which are idempotent and retried without a key; got "op-1"'],
    ['a signal that is not one', 'POST', '/v1/charges', { signal: 'stop' as unknown as AbortSignal }, 'option signal must be an AbortSignal; got "stop"'],
    ['a method with a space', 'PO ST', '/v1/charges', {}, 'option method must be an HTTP method name (letters only); got "PO ST"'],
    ['a path without its slash', 'POST', 'v1/charges', {}, "option path must start with '/'; got \"v1/charges\""],
    ['a path that is no string', 'POST', 7, {}, "option path must start with '/'; got 7"],
  ])('%s', async (_name, method, path, init, message) => {
    expect(await refusal(method, path, init)).toBe(message)
  })

  const plainJson = 'option body must be a string, bytes, URLSearchParams or plain JSON data (an object, an array or a scalar); got'
  it.each([
    ['a ReadableStream', () => new ReadableStream(), `${plainJson} a ReadableStream: a stream cannot be sent again on a retry; read it into bytes first`],
    ['a Map', () => new Map([['a', 1]]), `${plainJson} a Map: it would be sent as JSON.stringify renders it, often {}`],
    ['a bigint', () => 1n, 'option body must be a string, bytes, URLSearchParams or JSON data; got a bigint'],
  ])('a body of %s is described, never shown', async (_name, make, message) => {
    expect(await refusal('POST', '/upload', { body: make() as unknown as RequestBody })).toBe(message)
  })

  it('a body JSON cannot render names why, without showing the body', async () => {
    // Issue 22: JSON.stringify's own message names the members of the cycle, so it is not shown.
    expect(await refusal('POST', '/v1/charges', { body: circular as RequestBody })).toBe('option body must be JSON data that JSON.stringify sends as it is; got data holding a cycle (an object that contains itself)')
    expect(await refusal('POST', '/v1/charges', { body: { toJSON: () => undefined } as unknown as RequestBody })).toBe('option body must be JSON data that JSON.stringify sends as it is; got data JSON.stringify renders as nothing')
  })
})

describe("postgresKeyStore's db is refused in the same shape, and a connection string is never shown", () => {
  it.each([
    ['nothing', undefined, 'option db must have a query(config) method, such as a pg.Pool; got undefined'],
    ['an object without query', {}, 'option db must have a query(config) method, such as a pg.Pool; got an object (not shown)'],
    ['a connection string', 'postgres://app:s3cret@db/app', 'option db must have a query(config) method, such as a pg.Pool; got a string (not shown)'],
  ])('%s', (_name, db, message) => {
    expect(thrown(() => postgresKeyStore(db as unknown as KeyStoreQueryable))).toBe(message)
  })

  it('a connection inside an open transaction', () => {
    const inTransaction: KeyStoreQueryable = { query: () => Promise.resolve({ rows: [], rowCount: 0 }), getTransactionStatus: () => 'T' }
    expect(thrown(() => postgresKeyStore(inTransaction))).toBe(
      "option db must be a pg.Pool or a connection of its own, never one inside an open transaction (a rollback would delete a key already sent); got a connection inside an open transaction (transaction status 'T')",
    )
  })
})
