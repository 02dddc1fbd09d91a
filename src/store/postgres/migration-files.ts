import { readdirSync, readFileSync } from 'node:fs'

/** One numbered `.sql` file of `migrations/`, as written, before the schema is filled in. */
export interface MigrationFile {
  /** The file name without `.sql`, e.g. `001_idempotency_key`. */
  name: string
  sql: string
}

/**
 * The migrations, ordered by number. In the source tree (the test suite, `tsx`) they are read from
 * `migrations/*.sql` when this module loads. The build (`scripts/build.mjs`) replaces the compiled
 * module with one that embeds the same files as strings, so the published package never reads
 * them from disk and a bundler carries them along.
 */
export const MIGRATION_FILES: readonly MigrationFile[] = readMigrationFiles(new URL('./migrations/', import.meta.url))

function readMigrationFiles(dir: URL): MigrationFile[] {
  return readdirSync(dir)
    .filter((file) => /^\d+_.+\.sql$/.test(file))
    .sort()
    .map((file) => ({ name: file.replace(/\.sql$/, ''), sql: readFileSync(new URL(file, dir), 'utf8') }))
}
