/**
 * The statements of `migrate` and `checkSchema`: the migrations table and its lock. Split from
 * statements.ts by area (docs/conventions.md, "SQL"). Only the quoted schema is interpolated.
 */

/** Waits for the schema's migration lock; bounded by `lock_timeout` (SQLSTATE 55P03). */
export const LOCK_MIGRATIONS = `SELECT pg_advisory_xact_lock(hashtext('oncely:migrate'), hashtext($1))`

/** Bounds every lock wait of the transaction: the migration lock, and each DDL's table locks. $1: milliseconds. */
export const SET_LOCK_TIMEOUT = `SELECT set_config('lock_timeout', $1 || 'ms', true)`

export const CREATE_SCHEMA = (quotedSchema: string) => `CREATE SCHEMA IF NOT EXISTS ${quotedSchema}`

/**
 * The record of applied migrations. `breaking` is set from the file's `-- oncely:breaking` line:
 * an older oncely that finds an unknown breaking migration stops, and runs on when every unknown
 * one is additive.
 */
export const CREATE_MIGRATIONS_TABLE = (quotedSchema: string) => `
  CREATE TABLE IF NOT EXISTS ${quotedSchema}.migrations (
    id         integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    breaking   boolean     NOT NULL DEFAULT false
  )`

/** Tables created before `breaking` existed get it; a no-op after. */
export const ADD_MIGRATIONS_BREAKING = (quotedSchema: string) => `ALTER TABLE ${quotedSchema}.migrations ADD COLUMN IF NOT EXISTS breaking boolean NOT NULL DEFAULT false`

export interface AppliedMigrationRow {
  id: number
  name: string
  breaking: boolean
}

export const SELECT_APPLIED_MIGRATIONS = (quotedSchema: string) => `SELECT id, name, breaking FROM ${quotedSchema}.migrations ORDER BY id`

/** For a migrations table from before `breaking` existed, read by a process that may not alter it. */
export const SELECT_APPLIED_MIGRATIONS_WITHOUT_BREAKING = (quotedSchema: string) => `SELECT id, name FROM ${quotedSchema}.migrations ORDER BY id`

export const INSERT_APPLIED_MIGRATION = (quotedSchema: string) => `INSERT INTO ${quotedSchema}.migrations (id, name, breaking) VALUES ($1, $2, $3)`

/** Whether a table exists. $1: the quoted schema and table, e.g. `"oncely".migrations`; NULL, not an error, when it does not. */
export const TABLE_EXISTS = `SELECT to_regclass($1) IS NOT NULL AS present`

/** How the key table is laid out, for `migrate({ partitions })` and `checkSchema`; no row when it does not exist. $1: the schema name. */
export const KEY_TABLE_LAYOUT = `
  SELECT c.relkind::text AS kind, pg_get_partkeydef(c.oid) AS partition_key,
         (SELECT count(*)::integer FROM pg_inherits i WHERE i.inhparent = c.oid) AS partitions
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = $1 AND c.relname = 'idempotency_key'`

export interface KeyTableLayoutRow {
  /** `p`: partitioned; `r`: a plain table. */
  kind: string
  /** `HASH (scope)` for a table `migrate({ partitions })` created; null when not partitioned. */
  partition_key: string | null
  partitions: number
}

/** The hash partitions of a key table created `PARTITION BY HASH (scope)`: `idempotency_key_p0` to `_p<n-1>`. */
export const CREATE_KEY_TABLE_PARTITIONS = (quotedSchema: string, partitions = 0) =>
  Array.from(
    { length: partitions },
    (_, remainder) => `CREATE TABLE ${quotedSchema}.idempotency_key_p${remainder} PARTITION OF ${quotedSchema}.idempotency_key FOR VALUES WITH (MODULUS ${partitions}, REMAINDER ${remainder});`,
  ).join('\n')
