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
