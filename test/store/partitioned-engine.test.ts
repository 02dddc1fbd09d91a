import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { readKeyTableLayout } from '../../src/store/postgres/partitions.js'
import { createTestDatabase, partitionTestDatabases, type TestDatabase } from '../helpers/db.js'

// The engine's whole path on a key table hash-partitioned by scope (issue 24, point 6): the
// tests of two existing files, run again here on databases `migrate({ partitions: 4 })` made.
// decisions.test.ts: claim, replay, conflict, take-over, release, suspend and resume, expiry
// and reclaim; store-conformance.test.ts: the store port's whole contract (claim, fenced writes,
// completion, lease, take-over, release, suspend, expiry); store-writes.test.ts: the sweeper's
// deletes, the stale count and the completion flight with its lost fence (oncely_fence_lost);
// batched-writes.test.ts: claims and completions of several keys, and scopes, in one statement.
// The outbox and inbox are not partitioned (docs/scale-out.md), so the relay's tests are not repeated.
partitionTestDatabases(4)
await import('../engine/decisions.test.js')
await import('./store-conformance.test.js')
await import('./store-writes.test.js')
await import('./batched-writes.test.js')

describe('the databases these tests ran on', () => {
  let db: TestDatabase
  beforeAll(async () => {
    db = await createTestDatabase()
  })
  afterAll(async () => {
    await db.close()
  })

  it('hold the key table hash-partitioned by scope into 4', async () => {
    expect(await readKeyTableLayout(db.pool, db.schema)).toEqual({ kind: 'partitioned', partitionKey: 'HASH (scope)', partitions: 4 })
  })
})
