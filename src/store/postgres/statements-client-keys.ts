/**
 * The statements of the client's PostgreSQL key store (`postgresKeyStore` in `oncely/client`):
 * its table, a claim, a read, a finish and a prune. Split from statements.ts by area
 * (docs/conventions.md, SQL). Values are always bound; only the schema and table names, quoted
 * once when the key store is made, are interpolated. None is prepared: the table's name is the
 * user's, so one process may hold several key stores.
 */

/** One operation's row. */
export interface ClientKeyRow {
  operation_id: string
  idempotency_key: string
  fingerprint: string
  created_at: Date
  finished_at: Date | null
  final_status: number | null
  expires_at: Date | null
}

export interface ClientKeyStatements {
  /** The table and its index, if missing: what `setupSql` shows a user's own migration tool. */
  setup: string
  /**
   * `setup` behind a transaction-scoped advisory lock, sent as one multi-statement query (which
   * PostgreSQL runs as one transaction): concurrent `CREATE TABLE IF NOT EXISTS` of one table can
   * still fail on the catalog's unique indexes (42710 or 23505), so setups take turns. One lock
   * for every table, named like the migrations' and the service's: setups are rare.
   */
  setupTakingTurns: string
  /** $1..$7 the row's columns in `ClientKeyRow` order. Returns the row only if this call inserted it. */
  insert: string
  /** $1 operation id. */
  select: string
  /** $1 operation id, $2 finished at, $3 final status, $4 expires at. */
  finish: string
  /** $1 now, $2 batch size. Small batches, so a large backlog never holds many row locks at once. */
  prune: string
}

/**
 * Builds the key store's statements. `schema` and `table` are already-quoted identifiers;
 * `expiresIndex` the quoted name of the index on `expires_at`.
 */
export function buildClientKeyStatements(schema: string, table: string, expiresIndex: string): ClientKeyStatements {
  const qualified = `${schema}.${table}`
  const columns = 'operation_id, idempotency_key, fingerprint, created_at, finished_at, final_status, expires_at'
  const setup = [
    `CREATE TABLE IF NOT EXISTS ${qualified} (`,
    '  operation_id text PRIMARY KEY,',
    '  idempotency_key text NOT NULL,',
    '  fingerprint text NOT NULL,',
    '  created_at timestamptz NOT NULL,',
    '  finished_at timestamptz,',
    '  final_status integer,',
    '  expires_at timestamptz',
    ');',
    `CREATE INDEX IF NOT EXISTS ${expiresIndex} ON ${qualified} (expires_at) WHERE expires_at IS NOT NULL;`,
  ].join('\n')
  return {
    setup,
    setupTakingTurns: `SELECT pg_advisory_xact_lock(hashtext('oncely:client-keys'));\n${setup}`,
    insert: `INSERT INTO ${qualified} (${columns}) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (operation_id) DO NOTHING RETURNING ${columns}`,
    select: `SELECT ${columns} FROM ${qualified} WHERE operation_id = $1`,
    finish: `UPDATE ${qualified} SET finished_at = $2, final_status = $3, expires_at = $4 WHERE operation_id = $1`,
    prune: `DELETE FROM ${qualified} WHERE operation_id IN (SELECT operation_id FROM ${qualified} WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
  }
}
