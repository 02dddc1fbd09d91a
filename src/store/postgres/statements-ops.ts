/**
 * The statements of operations tooling: the keys CLI and its library functions, the stats, the
 * metrics' gauges and the reconciler's search. Split from statements.ts by area (docs/conventions.md, SQL).
 * Values are always bound; only the already-quoted schema is interpolated. None of them is on
 * the request path, so none is prepared.
 *
 * Timestamps are read as text (and ages as milliseconds computed in the database's clock), so
 * a value compared back in a later statement round-trips exactly (Invariant 3).
 */

const ms = (param: string) => `${param}::bigint * interval '1 millisecond'`
const ageMs = (column: string) => `(EXTRACT(EPOCH FROM (now() - ${column})) * 1000)::bigint`

/** One key as `listKeys` and `inspectKey` see it. */
export interface KeyRow {
  scope: string
  key: string
  status: 'in_progress' | 'completed' | 'failed'
  claim_id: string
  fingerprint: string
  recovery_point: string | null
  /** A claim holds a fence token while an owner (live or dead) has it; NULL once suspended. */
  held: boolean
  locked_at: string | null
  created_at: string
  expires_at: string
  /** Milliseconds since the lease was last renewed (NULL for a settled key). */
  lease_age_ms: string | null
  age_ms: string
  expired: boolean
  /** `in_progress` and (suspended, or the lease is older than the stale threshold). */
  stuck: boolean
  response_status: number | null
  /** Taken over or suspended at some time: an earlier owner may have acted on it. */
  interrupted: boolean
  /** Why an owner could not store its outcome (the claim stays suspended), else NULL. */
  outcome_error: string | null
}

/** `KeyRow` and what only the detail view needs. */
export interface KeyDetailRow extends KeyRow {
  fence_token: string | null
  step_results: Record<string, unknown>
  response_headers: Array<[string, string]> | null
  response_body: Buffer | null
}

export interface StatsRow {
  in_progress: number
  held: number
  suspended: number
  stuck: number
  completed: number
  failed: number
  expired_unswept: number
  oldest_expired_ms: string | null
  oldest_running_created_at: string | null
  oldest_running_age_ms: string | null
  oldest_running_lease_age_ms: string | null
  table_bytes: string
}

export interface RunningClaimsRow {
  held: number
  suspended: number
  stale_by_lease: number
  stale_by_creation: number
  oldest_lease_age_ms: string | null
  oldest_age_ms: string | null
}

/** A claim the reconciler may settle: nobody renewed it for the threshold, or it was suspended. */
export interface ReconcilableRow {
  scope: string
  key: string
  claim_id: string
}

/** The value bound as the stats statement's $2. */
export function statsTableName(schema: string): string {
  return `${schema}.idempotency_key`
}

export interface OpsStatements {
  listKeys: string
  inspectKey: string
  releaseKey: string
  stats: string
  runningClaims: string
  reconcilable: string
}

/** Builds the operations statements for one schema. `schema` is an already-quoted identifier. */
export function buildOpsStatements(schema: string): OpsStatements {
  const table = `${schema}.idempotency_key`
  const columns = `k.scope, k.key, k.status, k.claim_id::text, k.fingerprint, k.recovery_point,
         (k.status = 'in_progress' AND k.fence_token IS NOT NULL) AS held, k.locked_at::text, k.created_at::text, k.expires_at::text,
         CASE WHEN k.status = 'in_progress' THEN ${ageMs('k.locked_at')} END AS lease_age_ms,
         ${ageMs('k.created_at')} AS age_ms, k.expires_at <= now() AS expired,
         k.status = 'in_progress' AND (k.fence_token IS NULL OR k.locked_at <= now() - ${ms('$1')}) AS stuck,
         k.response_status, k.interrupted, k.outcome_error`
  return {
    // $1 stale ms, $2 user or NULL for every user, $3 only stuck claims, $4 limit. Stuck claims
    // come first, oldest lease first; then the newest keys.
    listKeys: `
      SELECT ${columns}
        FROM ${table} k
       WHERE ($2::text IS NULL OR k.scope = $2)
         AND (NOT $3::boolean OR (k.status = 'in_progress' AND (k.fence_token IS NULL OR k.locked_at <= now() - ${ms('$1')})))
       ORDER BY (k.status = 'in_progress') DESC, k.locked_at ASC NULLS LAST, k.created_at DESC
       LIMIT $4`,
    // $1 stale ms, $2 user, $3 key. Every query carries the user (DESIGN.md, "The record").
    inspectKey: `
      SELECT ${columns}, k.fence_token::text, k.step_results, k.response_headers, k.response_body
        FROM ${table} k
       WHERE k.scope = $2 AND k.key = $3`,
    // Deletes exactly the state the operator was shown, or nothing: $1 user, $2 key, $3 claim id,
    // $4 token seen (NULL when suspended or settled), $5 locked_at seen as text, $6 status seen,
    // $7 stale ms. An in_progress claim is deleted only while its lease is still stale, so an
    // owner that renewed, or a retry that took it over meanwhile, keeps it (Invariant 4).
    releaseKey: `
      DELETE FROM ${table}
       WHERE scope = $1 AND key = $2 AND claim_id = $3::uuid
         AND fence_token IS NOT DISTINCT FROM $4::uuid
         AND locked_at IS NOT DISTINCT FROM $5::timestamptz
         AND status = $6
         AND (status <> 'in_progress' OR fence_token IS NULL OR locked_at <= now() - ${ms('$7')})
      RETURNING claim_id::text`,
    // $1 stale ms, $2 the table's qualified name (`statsTableName`). One scan; the table's size
    // from the catalog.
    stats: `
      SELECT count(*) FILTER (WHERE status = 'in_progress')::integer AS in_progress,
             count(*) FILTER (WHERE status = 'in_progress' AND fence_token IS NOT NULL)::integer AS held,
             count(*) FILTER (WHERE status = 'in_progress' AND fence_token IS NULL)::integer AS suspended,
             count(*) FILTER (WHERE status = 'in_progress' AND (fence_token IS NULL OR locked_at <= now() - ${ms('$1')}))::integer AS stuck,
             count(*) FILTER (WHERE status = 'completed')::integer AS completed,
             count(*) FILTER (WHERE status = 'failed')::integer AS failed,
             count(*) FILTER (WHERE expires_at <= now())::integer AS expired_unswept,
             max(${ageMs('expires_at')}) FILTER (WHERE expires_at <= now()) AS oldest_expired_ms,
             min(created_at) FILTER (WHERE status = 'in_progress')::text AS oldest_running_created_at,
             max(${ageMs('created_at')}) FILTER (WHERE status = 'in_progress') AS oldest_running_age_ms,
             max(${ageMs('locked_at')}) FILTER (WHERE status = 'in_progress') AS oldest_running_lease_age_ms,
             pg_total_relation_size($2::regclass)::text AS table_bytes
        FROM ${table}`,
    // $1 stale ms. Running claims only, through the partial index on in_progress rows: a hung
    // handler keeps its lease fresh, so it shows by its age since creation.
    runningClaims: `
      SELECT count(*) FILTER (WHERE fence_token IS NOT NULL)::integer AS held,
             count(*) FILTER (WHERE fence_token IS NULL)::integer AS suspended,
             count(*) FILTER (WHERE locked_at <= now() - ${ms('$1')})::integer AS stale_by_lease,
             count(*) FILTER (WHERE created_at <= now() - ${ms('$1')})::integer AS stale_by_creation,
             max(${ageMs('locked_at')}) AS oldest_lease_age_ms,
             max(${ageMs('created_at')}) AS oldest_age_ms
        FROM ${table}
       WHERE status = 'in_progress'`,
    // $1 reconcile-after ms, $2 limit. Suspended claims nobody retried and claims whose owner
    // stopped renewing; oldest lease first. SKIP LOCKED is not needed: the engine's take-over
    // that follows is the compare-and-swap that decides (Invariant 4). Issue 22: a held claim
    // counts as stopped only past the stale threshold it was made under too, as the take-over checks.
    reconcilable: `
      SELECT scope, key, claim_id::text
        FROM ${table}
       WHERE status = 'in_progress'
         AND locked_at <= now() - ${ms('CASE WHEN fence_token IS NULL THEN $1::bigint ELSE GREATEST($1::bigint, stale_after_ms) END')}
       ORDER BY locked_at
       LIMIT $2`,
  }
}
