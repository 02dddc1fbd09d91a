import { OncelyError } from '../../errors.js'
import { invalid } from '../../option-validation.js'
import type { Queryable } from './executor.js'
import { CREATE_KEY_TABLE_PARTITIONS, KEY_TABLE_LAYOUT, type KeyTableLayoutRow } from './statements-migrate.js'

/**
 * Native hash partitioning of the key table by scope (issue 24, point 6; docs/scale-out.md,
 * "Hash partitions by scope"). Only a fresh schema is created partitioned: migration 001 is applied
 * with `PARTITION BY HASH (user_id)` (the column's name until migration 007 renames it `scope`)
 * and its partitions in the same transaction. Converting a
 * table that already holds keys is refused, not attempted: it would move every row under a lock
 * the running services wait on.
 */

/** More partitions than this cost the planner more than they save on one table. */
export const MAX_PARTITIONS = 1024

/** The partition key `migrate({ partitions })` creates, as `pg_get_partkeydef` prints it once migration 007 has renamed the column. */
export const PARTITION_KEY = 'HASH (scope)'

/** The same key as migration 001 names it, and as a schema partitioned before migration 007 prints it. */
const PARTITION_KEY_BEFORE_007 = 'HASH (user_id)'

/** Whether `definition` (`pg_get_partkeydef`) is the hash of the scope, under either of the column's names. */
export function isScopePartitionKey(definition: string): boolean {
  return definition === PARTITION_KEY || definition === PARTITION_KEY_BEFORE_007
}

/** Where migration 001 opens the key table's definition (whatever the schema's name). */
const KEY_TABLE_CREATE = /^CREATE TABLE .+\.idempotency_key \($/m

/** The migration whose `CREATE TABLE` makes the key table. */
export const KEY_TABLE_MIGRATION = 1

export type KeyTableLayout = { kind: 'absent' } | { kind: 'plain' } | { kind: 'partitioned'; partitionKey: string; partitions: number }

/** Whether `value` is a partition count oncely makes and checks: a whole number from 2 to `MAX_PARTITIONS`. */
export function isPartitionCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 2 && value <= MAX_PARTITIONS
}

export function resolvePartitions(value: unknown): number | undefined {
  if (value === undefined) return undefined
  if (!isPartitionCount(value)) {
    throw invalid('partitions', `must be an integer from 2 to ${MAX_PARTITIONS}`, value)
  }
  return value
}

/**
 * Migration 001's SQL with the key table created partitioned. Every unique constraint of the
 * migrations on it is the primary key `(scope, key)`, which holds the partition key, as
 * PostgreSQL requires; its other indexes (on `expires_at`, on `locked_at`) and checks are made
 * on each partition; later migrations only add columns and a function, which partitions follow.
 * The file itself is never edited (docs/conventions.md, "Migrations"), so the text it is matched
 * against cannot change under this.
 */
export function partitionKeyTable(sql: string, quotedSchema: string, partitions: number): string {
  const create = KEY_TABLE_CREATE.exec(sql)?.index ?? -1
  const end = create < 0 ? -1 : sql.indexOf('\n);\n', create)
  if (end < 0) throw new Error('migration 001 no longer creates idempotency_key as expected: partitioning cannot be applied to it')
  const partitioned = `${sql.slice(0, end)}\n) PARTITION BY ${PARTITION_KEY_BEFORE_007};\n${sql.slice(end + '\n);\n'.length)}`
  return `${partitioned.trimEnd()}\n\n-- Hash partitions by scope (migrate({ partitions: ${partitions} })).\n${CREATE_KEY_TABLE_PARTITIONS(quotedSchema, partitions)}\n`
}

export async function readKeyTableLayout(db: Queryable, schema: string): Promise<KeyTableLayout> {
  const { rows } = await db.query<KeyTableLayoutRow>({ text: KEY_TABLE_LAYOUT, values: [schema] })
  const row = rows[0]
  if (row === undefined) return { kind: 'absent' }
  if (row.kind !== 'p') return { kind: 'plain' }
  return { kind: 'partitioned', partitionKey: row.partition_key ?? '', partitions: row.partitions }
}

/**
 * `migrate({ partitions })` on a schema whose key table exists: the same partitioning again is
 * a no-op (every process may start with the same options); anything else is refused, with
 * nothing changed.
 */
export function refuseRepartitioning(layout: KeyTableLayout, partitions: number, quotedSchema: string): void {
  const table = `${quotedSchema}.idempotency_key`
  if (layout.kind === 'plain') {
    throw new OncelyError(
      'ONCELY_MIGRATION_FAILED',
      `${table} already exists and is not partitioned: partitions applies only when migrate creates the schema; converting a table that holds keys is not supported (docs/scale-out.md, "Hash partitions by scope")`,
    )
  }
  if (layout.kind === 'partitioned' && (!isScopePartitionKey(layout.partitionKey) || layout.partitions !== partitions)) {
    throw new OncelyError(
      'ONCELY_MIGRATION_FAILED',
      `${table} is already partitioned by ${layout.partitionKey} into ${layout.partitions} partitions, not ${PARTITION_KEY} into ${partitions}: changing the partitioning is not supported; run migrate with partitions: ${layout.partitions}, or without it`,
    )
  }
}
