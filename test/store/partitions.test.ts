import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fingerprintRequest } from '../../src/index.js'
import { checkSchema, createPostgresStore, loadMigrations, migrate, migrationSql } from '../../src/store/postgres/index.js'
import { partitionKeyTable, readKeyTableLayout } from '../../src/store/postgres/partitions.js'
import { quoteSchema } from '../../src/store/postgres/schema-name.js'
import { buildStatements } from '../../src/store/postgres/statements.js'
import { CREATE_MIGRATIONS_TABLE, CREATE_SCHEMA, INSERT_APPLIED_MIGRATION } from '../../src/store/postgres/statements-migrate.js'
import { DEFAULT_LOCK_TIMEOUT_MS } from '../../src/store/postgres/store.js'
import { createTestDatabase, partitionTestDatabases, type TestDatabase } from '../helpers/db.js'
import { keyTable, storeClaim } from '../helpers/engine.js'

// `migrate({ partitions })` (issue 24, point 6): the key table created PARTITION BY HASH (user_id)
// (migration 007 renames the column scope),
// refused on a schema laid out otherwise, recognised by `checkSchema`, and each scoped statement
// planned on one partition. The engine's path on such a table: partitioned-engine.test.ts.

const PARTITIONS = 4
let db: TestDatabase
beforeAll(async () => {
  partitionTestDatabases(PARTITIONS)
  db = await createTestDatabase()
})
afterAll(async () => {
  await db.close()
})

const fingerprint = fingerprintRequest({ method: 'POST', route: '/v1/charges', body: { amount: 24 } })
const layoutOf = (schema: string) => readKeyTableLayout(db.pool, schema)

describe('migrate({ partitions })', () => {
  it('creates the key table hash-partitioned by scope, and a row lands in the partition of its scope', async () => {
    expect(await layoutOf(db.schema)).toEqual({ kind: 'partitioned', partitionKey: 'HASH (scope)', partitions: PARTITIONS })
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const scopes = Array.from({ length: 16 }, (_, i) => `user-${i}`)
    for (const scope of scopes) await storeClaim(store, { scope, key: 'k', fingerprint })
    const { rows } = await db.pool.query<{ partition: string; n: number }>(
      `SELECT c.relname AS partition, count(*)::integer AS n FROM ${keyTable(db)} k JOIN pg_class c ON c.oid = k.tableoid WHERE k.scope = ANY($1) GROUP BY c.relname`,
      [scopes],
    )
    // Sixteen scopes hash to more than one of the four partitions, none to the parent.
    expect(rows.length).toBeGreaterThan(1)
    for (const row of rows) expect(row.partition).toMatch(/^idempotency_key_p[0-3]$/)
    expect(rows.reduce((sum, row) => sum + row.n, 0)).toBe(scopes.length)
  })

  it('on a schema partitioned the same way: current, nothing applied; without the option: current too', async () => {
    expect(await migrate({ pool: db.pool, schema: db.schema, partitions: PARTITIONS })).toMatchObject({ applied: [] })
    expect(await migrate({ pool: db.pool, schema: db.schema })).toMatchObject({ applied: [] })
  })

  it('with another number of partitions: refused, saying what the table holds, and nothing changes', async () => {
    await expect(migrate({ pool: db.pool, schema: db.schema, partitions: 8 })).rejects.toMatchObject({
      code: 'ONCELY_MIGRATION_FAILED',
      message: expect.stringContaining(`is already partitioned by HASH (scope) into ${PARTITIONS} partitions, not HASH (scope) into 8`) as unknown,
    })
    expect(await layoutOf(db.schema)).toMatchObject({ partitions: PARTITIONS })
  })

  it('on a schema whose key table was created plain: refused (no conversion), and the table stays plain', async () => {
    const plain = `${db.schema} plain`
    await migrate({ pool: db.pool, schema: plain })
    await expect(migrate({ pool: db.pool, schema: plain, partitions: PARTITIONS })).rejects.toMatchObject({
      code: 'ONCELY_MIGRATION_FAILED',
      message: expect.stringContaining('already exists and is not partitioned: partitions applies only when migrate creates the schema') as unknown,
    })
    expect(await layoutOf(plain)).toEqual({ kind: 'plain' })
  })

  it('on a schema whose only migration is 001, with a plain key table: refused at that migration, and the later ones are not applied', async () => {
    const schema = `${db.schema} only 001`
    const quoted = quoteSchema(schema)
    await db.pool.query(CREATE_SCHEMA(quoted))
    await db.pool.query(CREATE_MIGRATIONS_TABLE(quoted))
    const [first] = await loadMigrations(schema)
    if (first === undefined) throw new Error('no migration shipped')
    await db.pool.query(first.sql)
    await db.pool.query({ text: INSERT_APPLIED_MIGRATION(quoted), values: [first.id, first.name, first.breaking] })
    await expect(migrate({ pool: db.pool, schema, partitions: PARTITIONS })).rejects.toMatchObject({ code: 'ONCELY_MIGRATION_FAILED', message: expect.stringContaining('already exists and is not partitioned') as unknown })
    expect((await db.pool.query<{ id: number }>(`SELECT id FROM ${quoted}.migrations`)).rows).toEqual([{ id: 1 }])
  })

  it('refuses a count that is not an integer from 2 to 1024, before connecting', async () => {
    for (const partitions of [1, 1025, 2.5, '4']) {
      await expect(migrate({ pool: db.pool, schema: `unused ${randomUUID()}`, partitions: partitions as number })).rejects.toMatchObject({ code: 'ONCELY_INVALID_OPTION', message: expect.stringContaining('partitions must be an integer from 2 to 1024') as unknown })
    }
  })
})

describe('migrate({ partitions }) at its bounds, and on a migration 001 it does not recognise', () => {
  it('takes 2 and 1024 partitions, each remainder a table of its own', async () => {
    const two = await migrationSql('bounds', { partitions: 2 })
    expect(two).toContain(') PARTITION BY HASH (user_id);')
    expect(two).toContain('CREATE TABLE "bounds".idempotency_key_p1 PARTITION OF "bounds".idempotency_key FOR VALUES WITH (MODULUS 2, REMAINDER 1);')
    expect(two).not.toContain('idempotency_key_p2 ')
    expect(await migrationSql('bounds', { partitions: 1024 })).toContain('idempotency_key_p1023 PARTITION OF "bounds".idempotency_key FOR VALUES WITH (MODULUS 1024, REMAINDER 1023);')
  })

  it("partitions the key table's definition wherever it starts, and appends its partitions after the migration's last line", () => {
    expect(partitionKeyTable('CREATE TABLE "s".idempotency_key (\n  id integer\n);\n', '"s"', 2)).toBe(
      [
        'CREATE TABLE "s".idempotency_key (',
        '  id integer',
        ') PARTITION BY HASH (user_id);',
        '',
        '-- Hash partitions by scope (migrate({ partitions: 2 })).',
        'CREATE TABLE "s".idempotency_key_p0 PARTITION OF "s".idempotency_key FOR VALUES WITH (MODULUS 2, REMAINDER 0);',
        'CREATE TABLE "s".idempotency_key_p1 PARTITION OF "s".idempotency_key FOR VALUES WITH (MODULUS 2, REMAINDER 1);',
        '',
      ].join('\n'),
    )
  })

  it('refuses to partition a migration 001 that no longer creates the key table as expected, rather than guess', () => {
    const refused = /migration 001 no longer creates idempotency_key as expected/
    // Another table closed the way the key table is: only the key table's own definition is partitioned.
    expect(() => partitionKeyTable('CREATE TABLE "s".other (\n  id integer\n);\n', '"s"', 4)).toThrow(refused)
    // The key table, with its definition not closed on a line of its own.
    expect(() => partitionKeyTable('CREATE TABLE "s".idempotency_key (\n  id integer);\n', '"s"', 4)).toThrow(refused)
  })

  it('refuses a key table partitioned by something else than the scope, naming its key, and checkSchema reports it', async () => {
    const schema = `${db.schema} by key`
    await migrate({ pool: db.pool, schema })
    await db.pool.query(`DROP TABLE ${quoteSchema(schema)}.idempotency_key`)
    await db.pool.query(`CREATE TABLE ${quoteSchema(schema)}.idempotency_key (scope text NOT NULL, key text NOT NULL) PARTITION BY HASH (key)`)
    await expect(migrate({ pool: db.pool, schema, partitions: PARTITIONS })).rejects.toMatchObject({
      code: 'ONCELY_MIGRATION_FAILED',
      message: expect.stringContaining(`${quoteSchema(schema)}.idempotency_key is already partitioned by HASH (key) into 0 partitions, not HASH (scope) into ${PARTITIONS}`) as unknown,
    })
    const report = await checkSchema({ pool: db.pool, schema })
    expect(report.problems).toContainEqual({ kind: 'different', detail: 'table idempotency_key is partitioned by HASH (key), expected HASH (scope) or not partitioned' })
  })
})

describe('checkSchema on a partitioned schema', () => {
  it('compares a key table partitioned by hand into more partitions than migrate makes as a plain one, listing them, instead of failing', async () => {
    const schema = `${db.schema} many`
    await migrate({ pool: db.pool, schema })
    const table = `${quoteSchema(schema)}.idempotency_key`
    await db.pool.query(`DROP TABLE ${table}`)
    await db.pool.query(`CREATE TABLE ${table} (scope text NOT NULL, key text NOT NULL) PARTITION BY HASH (key)`)
    // One past MAX_PARTITIONS, made in one round trip; the names are SQL literals inside the block.
    const literal = (text: string) => `'${text.replaceAll("'", "''")}'`
    await db.pool.query(`DO $$ BEGIN FOR i IN 0..1024 LOOP
      EXECUTE format('CREATE TABLE %s.%I PARTITION OF %s FOR VALUES WITH (MODULUS 1025, REMAINDER %s)', ${literal(quoteSchema(schema))}, 'idempotency_key_p' || i, ${literal(table)}, i);
    END LOOP; END $$`)
    const report = await checkSchema({ pool: db.pool, schema })
    expect(report.ok).toBe(false)
    expect(report.problems).toContainEqual({ kind: 'unexpected', detail: expect.stringContaining('column idempotency_key_p1024.key is not part of') as unknown })
  })

  it('is healthy with the fewest partitions migrate makes, 2', async () => {
    const schema = `${db.schema} two`
    await migrate({ pool: db.pool, schema, partitions: 2 })
    expect(await checkSchema({ pool: db.pool, schema })).toMatchObject({ ok: true, problems: [] })
  })

  it('is healthy', async () => {
    expect(await checkSchema({ pool: db.pool, schema: db.schema })).toMatchObject({ ok: true, problems: [] })
  })

  it("still compares each partition: an index added to one, or a partition detached, is reported", async () => {
    const schema = `${db.schema} doctor`
    await migrate({ pool: db.pool, schema, partitions: 3 })
    await db.pool.query(`CREATE INDEX stray_created_at ON ${quoteSchema(schema)}.idempotency_key_p1 (created_at)`)
    await db.pool.query(`ALTER TABLE ${quoteSchema(schema)}.idempotency_key DETACH PARTITION ${quoteSchema(schema)}.idempotency_key_p2`)
    const report = await checkSchema({ pool: db.pool, schema })
    expect(report.ok).toBe(false)
    expect(report.problems).toContainEqual({ kind: 'unexpected', detail: expect.stringContaining('index idempotency_key_p1: stray_created_at is not part of') as unknown })
    expect(report.problems).toContainEqual({ kind: 'unexpected', detail: expect.stringContaining('column idempotency_key_p2.key is not part of') as unknown })
  })
})

describe('the scoped statements are planned on one partition', () => {
  const sql = () => buildStatements(quoteSchema(db.schema), undefined)

  /** The partitions an EXPLAIN of `text` with `values` bound reads or writes. */
  async function partitionsIn(text: string, values: unknown[]): Promise<string[]> {
    const { rows } = await db.pool.query<{ 'QUERY PLAN': unknown }>({ text: `EXPLAIN (FORMAT JSON) ${text}`, values })
    const found = new Set<string>()
    const walk = (node: unknown): void => {
      if (Array.isArray(node)) return node.forEach(walk)
      if (typeof node !== 'object' || node === null) return
      for (const [name, value] of Object.entries(node)) {
        if (name === 'Relation Name' && typeof value === 'string' && /_p\d+$/.test(value)) found.add(value)
        else walk(value)
      }
    }
    walk(rows[0]?.['QUERY PLAN'])
    return [...found]
  }

  it('the claim and the completions read only the partition of their scope; the sweep reads every one', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema })
    const scope = `prune-${randomUUID().slice(0, 8)}`
    const claim = await storeClaim(store, { scope, key: 'k', fingerprint })
    if (claim.kind !== 'claimed') throw new Error('the key was not free')
    const { rows } = await db.pool.query<{ partition: string }>(`SELECT c.relname AS partition FROM ${keyTable(db)} k JOIN pg_class c ON c.oid = k.tableoid WHERE k.scope = $1`, [scope])
    const home = rows[0]?.partition
    expect(home).toMatch(/^idempotency_key_p\d$/)
    const token = claim.claim.fenceToken
    // $8: the key channel a marked row notifies on (migration 006).
    const completion = [scope, 'k', token, 'completed', 200, '[]', Buffer.from('{}'), 'oncely_keys_test']
    expect(await partitionsIn(sql().claim.text, [scope, 'k', 'hash', 86_400_000, randomUUID(), randomUUID(), DEFAULT_LOCK_TIMEOUT_MS, null])).toEqual([home])
    expect(await partitionsIn(sql().complete.text, completion)).toEqual([home])
    expect(await partitionsIn(sql().completeInFlight.text, completion)).toEqual([home])
    expect(await partitionsIn(sql().readKey.text, [scope, 'k'])).toEqual([home])
    // What the check above would see were nothing pruned.
    expect((await partitionsIn(sql().sweepExpired.text, [10])).sort()).toEqual(Array.from({ length: PARTITIONS }, (_, i) => `idempotency_key_p${i}`))
  })

  it('a sweep batch reads its own rows, not the whole expired backlog, batch after batch', async () => {
    // 100 000 settled keys over 500 scopes, the first 4 000 expired: big enough that the planner
    // prefers probing row by row to reading a table whole. Joined back by key, it hashed every
    // expired row of every partition for each batch of 20 (and a generic plan of the named
    // statement, after five runs, the whole table).
    const rows = 100_000
    const backlog = 4000
    await db.pool.query(
      `INSERT INTO ${keyTable(db)} (scope, key, fingerprint, status, claim_id, response_status, response_headers, response_body, created_at, updated_at, expires_at)
       SELECT 'backlog-' || (i % 500), 'key-' || i, 'x', 'completed', gen_random_uuid(), 201, '[]'::jsonb, '\\x7b7d'::bytea,
              now() - interval '2 days', now() - interval '2 days', now() + (i - ${backlog}) * interval '1 second'
         FROM generate_series(1, ${rows}) AS i`,
    )
    await db.pool.query(`ANALYZE ${keyTable(db)}`)
    const client = await db.pool.connect()
    try {
      // The store on one connection inside a transaction, so that the transaction's own
      // counters are the sweep's and everything is rolled back after.
      const store = createPostgresStore({ pool: { query: async (config) => client.query(config) as never, connect: () => db.pool.connect() }, schema: db.schema })
      await client.query('BEGIN')
      const partitions = `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::integer AS n
                            FROM pg_stat_xact_user_tables WHERE schemaname = $1 AND relname LIKE 'idempotency\\_key\\_p%'`
      let readBefore = 0
      for (let batch = 0; batch < 8; batch++) {
        expect(await store.sweepExpired(20)).toBe(20)
        const read = (await client.query<{ n: number }>(partitions, [db.schema])).rows[0]?.n ?? 0
        // The batch's 20 rows, and the few each partition's index hands the merge before it stops.
        expect(read - readBefore).toBeLessThanOrEqual(20 + 4 * PARTITIONS)
        readBefore = read
      }
    } finally {
      await client.query('ROLLBACK')
      client.release()
      await db.pool.query(`DELETE FROM ${keyTable(db)} WHERE scope LIKE 'backlog-%'`)
    }
  })
})
