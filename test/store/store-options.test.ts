import { createHash } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createPostgresStore, isConnectionError, isTransientPgError, sqlState, type PoolLike, type QueryConfig } from '../../src/store/postgres/index.js'
import { quoteSchema } from '../../src/store/postgres/schema-name.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'

// The store's options, the schema's quoting and the SQLSTATE classification at their edges
// (issue 13: mutation testing of src/store/postgres).
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const refusal = (options: unknown): string => {
  try {
    createPostgresStore(options as Parameters<typeof createPostgresStore>[0])
  } catch (error) {
    expect((error as { code?: string }).code).toBe('ONCELY_INVALID_OPTION')
    return (error as Error).message
  }
  throw new Error('accepted')
}

/** The test database's pool, recording every statement the store sends. */
function recordingPool(): { pool: PoolLike; sent: QueryConfig[] } {
  const sent: QueryConfig[] = []
  const pool = {
    query: (config: QueryConfig) => {
      sent.push(config)
      return db.pool.query(config as never)
    },
    connect: () => db.pool.connect(),
  } as unknown as PoolLike
  return { pool, sent }
}

describe('createPostgresStore', () => {
  it('refuses a pool without query and connect', () => {
    expect(refusal(null)).toBe('option options must be an object { pool, schema? }; got null')
    for (const options of [{}, { pool: null }, { pool: { query() {} } }, { pool: { connect() {} } }]) {
      expect(refusal(options)).toMatch(/^option pool must have query\(\) and connect\(\), like pg\.Pool; got (undefined|null|an object \(not shown\))$/)
    }
  })

  it('each timeout is a positive integer, and a lock wait is shorter than a statement', () => {
    for (const value of [0, -5, 1.5, '100']) {
      expect(refusal({ pool: db.pool, statementTimeoutMs: value })).toBe(`option statementTimeoutMs must be a positive integer; got ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`)
      expect(refusal({ pool: db.pool, lockTimeoutMs: value })).toBe(`option lockTimeoutMs must be a positive integer; got ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`)
    }
    expect(refusal({ pool: db.pool, statementTimeoutMs: 2000 })).toBe('option lockTimeoutMs must be below statementTimeoutMs (2000); got 2000')
    expect(() => createPostgresStore({ pool: db.pool, statementTimeoutMs: 2001 })).not.toThrow()
    expect(() => createPostgresStore({ pool: db.pool, statementTimeoutMs: 5000, lockTimeoutMs: 4999 })).not.toThrow()
  })

  it('maxBatchSize is an integer from 1 to 1000', () => {
    for (const value of [0, -1, 1.5, '8', 1001]) {
      expect(refusal({ pool: db.pool, maxBatchSize: value })).toBe(`option maxBatchSize must be an integer from 1 to 1000; got ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`)
    }
    for (const value of [1, 1000]) expect(() => createPostgresStore({ pool: db.pool, maxBatchSize: value })).not.toThrow()
  })

  it('refuses a listen pool without query and connect, naming the option and never showing the pool', () => {
    for (const listen of [{ query() {} }, { connect() {} }, 5]) {
      expect(refusal({ pool: db.pool, listen })).toMatch(/^option listen must be a boolean, or a pool with query\(\) and connect\(\), like pg\.Pool; got /)
    }
  })

  it('a pool given to listen on is used even when the store’s own pool has one connection: only its own pool would be left with none to read with', () => {
    // The one-connection rule is for listening on the store's own pool (test/store/claim-watch.test.ts).
    expect('watchClaim' in createPostgresStore({ pool: db.newPool(1), schema: db.schema, listen: db.newPool(2) })).toBe(true)
  })

  it('lives in the schema oncely unless told', () => {
    expect(createPostgresStore({ pool: db.pool }).schema).toBe('oncely')
    expect(createPostgresStore({ pool: db.pool, schema: db.schema }).schema).toBe(db.schema)
  })

  it('names its statements by a hash of the quoted schema, so two schemas on one pool never share a prepared name; unnamed when turned off', async () => {
    const named = recordingPool()
    await createPostgresStore({ pool: named.pool, schema: db.schema }).read('u1', 'none')
    const prefix = `oncely_${createHash('sha256').update(quoteSchema(db.schema)).digest('hex').slice(0, 8)}`
    expect(named.sent.map((config) => config.name)).toEqual([expect.stringMatching(new RegExp(`^${prefix}_`))])
    const unnamed = recordingPool()
    await createPostgresStore({ pool: unnamed.pool, schema: db.schema, preparedStatements: false }).read('u1', 'none')
    expect(unnamed.sent.map((config) => config.name)).toEqual([undefined])
  })
})

describe('quoteSchema', () => {
  it('quotes any name of 1 to 63 bytes, doubling its quotes; refuses the rest', () => {
    expect(quoteSchema('Oncely Test')).toBe('"Oncely Test"')
    expect(quoteSchema('a"b"')).toBe('"a""b"""')
    expect(quoteSchema('s'.repeat(63))).toBe(`"${'s'.repeat(63)}"`)
    // PostgreSQL's limit is 63 bytes (NAMEDATALEN - 1), in UTF-8: 31 two-byte letters and one more byte.
    expect(quoteSchema(`${'é'.repeat(31)}s`)).toBe(`"${'é'.repeat(31)}s"`)
    for (const bad of ['', 's'.repeat(64), 'é'.repeat(32), `${'€'.repeat(21)}s`, 'a\0b', 7, undefined]) {
      expect(() => quoteSchema(bad)).toThrow(`option schema must be a non-empty string of at most 63 bytes in UTF-8; got ${JSON.stringify(bad) ?? 'undefined'}`)
    }
  })
})

describe('SQLSTATE classification at its edges', () => {
  const withCode = (code: unknown, extra: Record<string, unknown> = {}) => Object.assign(new Error('any'), { code, ...extra })

  it('a SQLSTATE is exactly five digits or capitals', () => {
    expect(sqlState(withCode('40001'))).toBe('40001')
    for (const code of ['4000', '400011', 'x40001', '40001 ', '4000a', 40001]) expect(sqlState(withCode(code))).toBeUndefined()
    expect(sqlState(null)).toBeUndefined()
    expect(sqlState('40001')).toBeUndefined()
    expect(isTransientPgError(withCode('400011'))).toBe(false)
  })

  it('every connection exception (class 08) is transient, and only that class', () => {
    expect(isTransientPgError(withCode('08P01'))).toBe(true)
    expect(isTransientPgError(withCode('80000'))).toBe(false)
    expect(isTransientPgError(withCode('X0800'))).toBe(false)
  })

  it('a connection error is a Node system error: a code starting with E and a syscall', () => {
    expect(isConnectionError(withCode('EPIPE', { syscall: 'write' }))).toBe(true)
    expect(isConnectionError(withCode('EPIPE'))).toBe(false)
    expect(isConnectionError(withCode('XPIPE', { syscall: 'write' }))).toBe(false)
    expect(isConnectionError(withCode(5, { syscall: 'write' }))).toBe(false)
    expect(isConnectionError(Object.assign(new Error('no code'), { syscall: 'write' }))).toBe(false)
    expect(isConnectionError(null)).toBe(false)
    expect(isConnectionError('ECONNRESET')).toBe(false)
  })
})
