/**
 * Catalog statements for `oncely doctor`: what a schema holds, in a form two schemas can be
 * compared by. Split from statements.ts by area (docs/conventions.md, SQL). $1 is always the schema name.
 */

export interface ColumnRow {
  table_name: string
  column_name: string
  data_type: string
  is_nullable: string
  column_default: string | null
}

export interface IndexRow {
  table_name: string
  index_name: string
  /** The index definition with the schema name taken out, so two schemas compare equal. */
  definition: string
}

export interface ConstraintRow {
  table_name: string
  constraint_name: string
  definition: string
}

export const SCHEMA_COLUMNS = `
  SELECT table_name, column_name, data_type, is_nullable, column_default
    FROM information_schema.columns
   WHERE table_schema = $1
   ORDER BY table_name, column_name`

export const SCHEMA_INDEXES = `
  SELECT tablename AS table_name, indexname AS index_name,
         -- A partitioned table's own index reads ON ONLY <schema>.<table>.
         replace(replace(indexdef, ' ON ONLY ' || quote_ident($1) || '.', ' ON ONLY '), ' ON ' || quote_ident($1) || '.', ' ON ') AS definition
    FROM pg_indexes
   WHERE schemaname = $1
   ORDER BY tablename, indexname`

export const SCHEMA_CONSTRAINTS = `
  SELECT rel.relname AS table_name, con.conname AS constraint_name, pg_get_constraintdef(con.oid) AS definition
    FROM pg_constraint con
    JOIN pg_class rel ON rel.oid = con.conrelid
    JOIN pg_namespace ns ON ns.oid = rel.relnamespace
   WHERE ns.nspname = $1
   ORDER BY rel.relname, con.conname`

export const APPLIED_MIGRATIONS = (quotedSchema: string) => `SELECT id, name FROM ${quotedSchema}.migrations ORDER BY id`

export const SCHEMA_EXISTS = `SELECT 1 FROM pg_namespace WHERE nspname = $1`
