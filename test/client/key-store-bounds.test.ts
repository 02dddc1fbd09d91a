import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type pg from 'pg'
import { randomUUID } from 'node:crypto'
import { writeFile, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { ClientAbortedError, createClient, fileKeyStore, postgresKeyStore, type KeyStore, type PostgresKeyStore } from '../../src/client/index.js'
import { deferred } from '../helpers/deferred.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { candidate } from './key-store-contract.js'
import { startServer, statusSequence, type TestServer } from './support/http-server.js'

// Issue 14 point 8: the deadline and the abort signal cover the key store; a connection inside
// the caller's open transaction is refused. The hung store is a real one: its INSERT waits on a
// row lock held by another connection's uncommitted claim of the same operation.
let db: TestDatabase
let server: TestServer
let blocker: pg.PoolClient | undefined
let tables = 0
beforeAll(async () => {
  db = await createTestDatabase({ max: 10 })
  server = await startServer(statusSequence(201))
})
afterEach(async () => {
  await blocker?.query('ROLLBACK').catch(() => undefined)
  blocker?.release()
  blocker = undefined
})
afterAll(async () => {
  await server.close()
  await db.close()
})

async function storeHeldByAnotherTransaction(operationId: string): Promise<PostgresKeyStore> {
  const store = postgresKeyStore(db.pool, { table: `client keys bounds ${++tables}` })
  await store.setup()
  const holder = await db.pool.connect()
  blocker = holder
  await holder.query('BEGIN')
  await holder.query({ text: `INSERT INTO "public"."client keys bounds ${tables}" (operation_id, idempotency_key, fingerprint, created_at) VALUES ($1, 'held', 'f', now())`, values: [operationId] })
  return store
}

describe('a key store that does not answer', () => {
  it('ends the call at its deadline with ONCELY_KEY_STORE_FAILED; nothing is sent', async () => {
    const keyStore = await storeHeldByAnotherTransaction('op')
    const client = createClient({ baseUrl: server.url, keyStore, deadlineMs: 300 })
    const before = server.requests.length
    await expect(client.post('/v1/charges', {}, { operationId: 'op' })).rejects.toMatchObject({ code: 'ONCELY_KEY_STORE_FAILED', message: expect.stringContaining('within the deadline of 300 ms') as unknown })
    expect(server.requests).toHaveLength(before)
  })

  it('ends the call when its signal aborts, with ONCELY_CLIENT_ABORTED; nothing is sent', async () => {
    const keyStore = await storeHeldByAnotherTransaction('op')
    const client = createClient({ baseUrl: server.url, keyStore })
    const controller = new AbortController()
    const before = server.requests.length
    const call = client.post('/v1/charges', {}, { operationId: 'op', signal: controller.signal })
    setImmediate(() => controller.abort(new Error('user pressed stop')))
    const error = await call.catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ClientAbortedError)
    expect((error as ClientAbortedError).cause).toMatchObject({ message: 'user pressed stop' })
    expect(server.requests).toHaveLength(before)
  })
})

describe('a key store left behind at the deadline', () => {
  it('may fail later without an unhandled rejection (issue 22)', async () => {
    // A real store that fails: its directory would have to be made under a regular file.
    const parent = await mkdtemp(path.join(tmpdir(), 'oncely-bounds-'))
    await writeFile(path.join(parent, 'a-file'), '')
    const failing = fileKeyStore(path.join(parent, 'a-file', 'keys'))
    const settled = deferred()
    const keyStore: KeyStore = {
      ...failing,
      // Not a handler on the claim's promise (that would hide the bug): a mark when it settles.
      claim: async (record) => {
        try {
          return await failing.claim(record)
        } finally {
          settled.resolve()
        }
      },
    }
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason)
    }
    process.on('unhandledRejection', onUnhandled)
    try {
      // The deadline passes while the key is minted, before the claim is waited for.
      const slowMint = (): string => {
        const until = performance.now() + 20
        while (performance.now() < until);
        return randomUUID()
      }
      const client = createClient({ baseUrl: server.url, keyStore, deadlineMs: 1, mintKey: slowMint })
      await expect(client.post('/v1/charges', {}, { operationId: 'op' })).rejects.toMatchObject({ code: 'ONCELY_KEY_STORE_FAILED', message: expect.stringContaining('within the deadline') as unknown })
      await settled.promise
      // Node reports an unhandled rejection once the microtasks have run: one turn is enough.
      await new Promise((resolve) => setImmediate(resolve))
      expect(unhandled).toEqual([])
    } finally {
      process.off('unhandledRejection', onUnhandled)
      await rm(parent, { recursive: true, force: true })
    }
  })
})

describe('postgresKeyStore and the caller’s transaction', () => {
  it('refuses a pg client inside an open transaction, which a rollback would undo after the key was sent', async () => {
    const options = { table: `client keys in transaction ${++tables}` }
    await postgresKeyStore(db.pool, options).setup()
    const connection = await db.pool.connect()
    try {
      const keyStore = postgresKeyStore(connection, options)
      await connection.query('BEGIN')
      await expect(keyStore.claim(candidate('op', 'k'))).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining('open transaction') as unknown })
      const before = server.requests.length
      await expect(createClient({ baseUrl: server.url, keyStore }).post('/v1/charges', {}, { operationId: 'op' })).rejects.toMatchObject({ code: 'ONCELY_KEY_STORE_FAILED' })
      expect(server.requests).toHaveLength(before)
      expect(() => postgresKeyStore(connection, options)).toThrow(expect.objectContaining({ code: 'ONCELY_INVALID_OPTION' }) as Error)
      await connection.query('ROLLBACK')
      // The same connection, idle again, is accepted.
      expect((await keyStore.claim(candidate('op', 'k'))).key).toBe('k')
    } finally {
      connection.release()
    }
  })
})
