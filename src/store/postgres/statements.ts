/**
 * Every SQL statement of the PostgreSQL store, one named constant each (style rule 6). Values
 * are always bound parameters; only the schema identifier is interpolated, quoted once when the
 * options are resolved. `name` makes `pg` prepare the hot ones once per connection; it carries
 * a hash of the schema so two stores on one pool never share a name with different text.
 */
import type { QueryConfig } from './executor.js'

/** Columns the claim statement returns, for every outcome. */
export interface ClaimRow {
  /** 'claimed' when this statement inserted the row, else 'existing'. */
  outcome: 'claimed' | 'existing'
  status: 'in_progress' | 'completed' | 'failed'
  request_hash: string
  claim_id: string
  lock_token: string | null
  recovery_point: string | null
  phase_data: Record<string, unknown>
  response_status: number | null
  response_headers: Array<[string, string]> | null
  response_body: Buffer | null
  /** The lease is older than the stale threshold, or the claim was suspended. */
  stale: boolean
  /** The key outlived its TTL: it is a new key. */
  expired: boolean
  /** Milliseconds until the lease would be stale (0 when it is). */
  stale_in_ms: number
}

export interface TakeOverRow {
  lock_token: string
  recovery_point: string | null
  phase_data: Record<string, unknown>
}

export interface ReclaimRow {
  claim_id: string
  lock_token: string
}

/** A statement bound to one schema; `values` are filled in at the call. */
export type Statement = Required<Pick<QueryConfig, 'text'>> & { name: string | undefined }

export interface Statements {
  claim: Statement
  takeOver: Statement
  reclaimExpired: Statement
  commitPhase: Statement
  renewLease: Statement
  complete: Statement
  release: Statement
  suspend: Statement
  sweepExpired: Statement
  countStaleClaims: Statement
}

const ttl = (param: string) => `${param}::bigint * interval '1 millisecond'`

/** Builds the statements for one schema. `schema` is an already-quoted identifier. */
export function buildStatements(schema: string, namePrefix: string | undefined): Statements {
  const table = `${schema}.idempotency_key`
  const named = (name: string, text: string): Statement => ({
    name: namePrefix === undefined ? undefined : `${namePrefix}_${name}`,
    text,
  })
  return {
    // Invariant 1: one statement decides ownership. $1 scope, $2 key, $3 fingerprint, $4 ttl ms,
    // $5 stale ms. If the INSERT loses to a row committed after this statement's snapshot, both
    // branches return nothing and the store runs it once more.
    claim: named(
      'claim',
      `WITH inserted AS (
        INSERT INTO ${table} (user_id, key, request_hash, status, claim_id, lock_token, locked_at, expires_at)
        VALUES ($1, $2, $3, 'in_progress', gen_random_uuid(), gen_random_uuid(), now(), now() + ${ttl('$4')})
        ON CONFLICT (user_id, key) DO NOTHING
        RETURNING status, request_hash, claim_id, lock_token, recovery_point, phase_data
      )
      SELECT 'claimed' AS outcome, status, request_hash, claim_id::text, lock_token::text, recovery_point,
             phase_data, NULL::integer AS response_status, NULL::jsonb AS response_headers,
             NULL::bytea AS response_body, false AS stale, false AS expired, 0 AS stale_in_ms
        FROM inserted
      UNION ALL
      SELECT 'existing', k.status, k.request_hash, k.claim_id::text, k.lock_token::text, k.recovery_point,
             k.phase_data, k.response_status, k.response_headers, k.response_body,
             k.status = 'in_progress' AND (k.lock_token IS NULL OR k.locked_at <= now() - ${ttl('$5')}),
             k.expires_at <= now(),
             GREATEST(0, CEIL(EXTRACT(EPOCH FROM (k.locked_at + ${ttl('$5')} - now())) * 1000))::integer
        FROM ${table} k
       WHERE k.user_id = $1 AND k.key = $2 AND NOT EXISTS (SELECT 1 FROM inserted)`,
    ),
    // Invariant 4: one taker. A compare-and-swap on the token the caller saw, re-checking
    // staleness: of all retries that saw the same stale claim, one matches; a lease renewed
    // meanwhile matches none. $1 scope, $2 key, $3 claim id, $4 seen token (NULL if suspended),
    // $5 fingerprint, $6 stale ms.
    takeOver: named(
      'take_over',
      `UPDATE ${table}
          SET lock_token = gen_random_uuid(), locked_at = now(), updated_at = now()
        WHERE user_id = $1 AND key = $2 AND claim_id = $3::uuid AND status = 'in_progress'
          AND lock_token IS NOT DISTINCT FROM $4::uuid AND request_hash = $5
          AND (lock_token IS NULL OR locked_at <= now() - ${ttl('$6')})
          AND expires_at > now()
      RETURNING lock_token::text, recovery_point, phase_data`,
    ),
    // An expired key is a new request (Invariant 9): the row is reset to a fresh claim with a new
    // identity, so step keys derived from it are new at the provider too. Re-checks expiry, so of
    // concurrent reclaimers one wins, and a row the sweeper deleted meanwhile matches nothing.
    // $1 scope, $2 key, $3 fingerprint, $4 ttl ms.
    reclaimExpired: named(
      'reclaim_expired',
      `UPDATE ${table}
          SET request_hash = $3, status = 'in_progress', claim_id = gen_random_uuid(),
              lock_token = gen_random_uuid(), locked_at = now(), recovery_point = NULL,
              phase_data = '{}'::jsonb, response_status = NULL, response_headers = NULL,
              response_body = NULL, created_at = now(), updated_at = now(),
              expires_at = now() + ${ttl('$4')}
        WHERE user_id = $1 AND key = $2 AND expires_at <= now()
      RETURNING claim_id::text, lock_token::text`,
    ),
    // Invariant 3 for every statement below: it matches only while the writer's token does.
    // $1 scope, $2 key, $3 token, $4 phase, $5 result as JSON text.
    commitPhase: named(
      'commit_phase',
      `UPDATE ${table}
          SET recovery_point = $4, phase_data = phase_data || jsonb_build_object($4::text, $5::jsonb),
              locked_at = now(), updated_at = now()
        WHERE user_id = $1 AND key = $2 AND lock_token = $3::uuid AND status = 'in_progress'`,
    ),
    // $1 scope, $2 key, $3 token, $4 ttl ms: a live claim never expires under its owner.
    renewLease: named(
      'renew_lease',
      `UPDATE ${table}
          SET locked_at = now(), expires_at = GREATEST(expires_at, now() + ${ttl('$4')})
        WHERE user_id = $1 AND key = $2 AND lock_token = $3::uuid AND status = 'in_progress'`,
    ),
    // $1 scope, $2 key, $3 token, $4 status, $5 response status, $6 headers JSON, $7 body bytes.
    complete: named(
      'complete',
      `UPDATE ${table}
          SET status = $4, response_status = $5, response_headers = $6::jsonb, response_body = $7,
              lock_token = NULL, locked_at = NULL, updated_at = now()
        WHERE user_id = $1 AND key = $2 AND lock_token = $3::uuid AND status = 'in_progress'`,
    ),
    // $1 scope, $2 key, $3 token.
    release: named(
      'release',
      `DELETE FROM ${table}
        WHERE user_id = $1 AND key = $2 AND lock_token = $3::uuid AND status = 'in_progress'`,
    ),
    // Keeps locked_at, so a suspended claim nobody retries still shows as stuck.
    suspend: named(
      'suspend',
      `UPDATE ${table}
          SET lock_token = NULL, updated_at = now()
        WHERE user_id = $1 AND key = $2 AND lock_token = $3::uuid AND status = 'in_progress'`,
    ),
    // Invariant 9: a small batch, skipping rows another transaction holds, and the expiry checked
    // again on the locked row so a key being reclaimed is never deleted. $1 batch size.
    sweepExpired: named(
      'sweep_expired',
      `WITH batch AS (
         SELECT user_id, key FROM ${table}
          WHERE expires_at <= now()
          ORDER BY expires_at
          LIMIT $1
          FOR UPDATE SKIP LOCKED
       )
       DELETE FROM ${table} k USING batch b
        WHERE k.user_id = b.user_id AND k.key = b.key AND k.expires_at <= now()`,
    ),
    // $1 stale ms. Running claims whose lease is older than the threshold: the operations stuck now.
    countStaleClaims: named(
      'count_stale_claims',
      `SELECT count(*)::integer AS count FROM ${table}
        WHERE status = 'in_progress' AND locked_at <= now() - ${ttl('$1')}`,
    ),
  }
}
