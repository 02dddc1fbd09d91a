/**
 * Every SQL statement of the PostgreSQL store, one named constant each (docs/conventions.md, SQL). Values
 * are always bound parameters; only the schema identifier is interpolated, quoted once when the
 * options are resolved. `name` makes `pg` prepare the hot ones once per connection; it carries
 * a hash of the schema so two stores on one pool never share a name with different text.
 */
import type { QueryConfig } from './executor.js'

/** Columns of a key's row, as the claim and read statements return them. */
export interface KeyRow {
  status: 'in_progress' | 'completed' | 'failed'
  fingerprint: string
  claim_id: string
  fence_token: string | null
  recovery_point: string | null
  step_results: Record<string, unknown>
  started_steps: string[]
  response_status: number | null
  response_headers: Array<[string, string]> | null
  response_body: Buffer | null
  interrupted: boolean
  outcome_error: string | null
  /** The stale threshold the claim was made under, or null when it recorded none. */
  stale_after_ms: number | null
  /** Milliseconds since created_at, in the database's clock. */
  age_ms: number
  /** Milliseconds since locked_at, or null. */
  lease_age_ms: number | null
  /** Milliseconds until expires_at (negative once past). */
  expires_in_ms: number
}

/**
 * The claim statement's row: inserted by this statement (nothing else to say: the caller knows
 * every column of the claim it made), or the one that was there, as one JSON text of its
 * `KeyRow` (`snapshotFromJson` turns it back, its body in base64).
 */
export type ClaimRow = { outcome: 'claimed'; snapshot: null } | { outcome: 'existing'; snapshot: string }

/** The batched claim statement's row: `ClaimRow` for the claim at index `n` of its input. */
export type ClaimBatchRow = ClaimRow & { n: number }

/** One claim of the batched claim statement's input (`claimBatch`'s $1, a JSON array of these). */
export interface ClaimBatchInput {
  n: number
  scope: string
  key: string
  fingerprint: string
  ttl_ms: number
  claim_id: string
  fence_token: string
  stale_after_ms: number | null
}

/** One completion of the batched completion statement's input (`completeBatch`'s $1, a JSON array of these). */
export interface CompletionBatchInput {
  n: number
  scope: string
  key: string
  fence_token: string
  status: 'completed' | 'failed'
  response_status: number
  response_headers: ReadonlyArray<readonly [string, string]>
  /** The body's bytes in base64. */
  response_body: string
}

/**
 * One step write of the batched step statements' input (`commitStepBatch`'s and
 * `markStepStartedBatch`'s $1, a JSON array of these): the values the single statement binds,
 * its JSON ones as the same text.
 */
export interface StepBatchInput {
  n: number
  scope: string
  key: string
  fence_token: string
  step: string
  /** The deferred results it carries, JSON text of an object. */
  carried: string
  /** `commitStepBatch`: the step's result, JSON text. */
  result?: string
  /** `markStepStartedBatch`: the recovery point the carried results move it to, or null for none. */
  recovery_point?: string | null
}

/** What a take-over or a reclaim returns: the new holder's state. */
export interface HeldRow {
  claim_id: string
  fence_token: string
  recovery_point: string | null
  step_results: Record<string, unknown>
  started_steps: string[]
  interrupted: boolean
}

/** A statement bound to one schema; `values` are filled in at the call. */
export type Statement = Required<Pick<QueryConfig, 'text'>> & { name: string | undefined }

export interface Statements {
  claim: Statement
  claimBatch: Statement
  readKey: Statement
  takeOver: Statement
  reclaimExpired: Statement
  commitStep: Statement
  commitStepBatch: Statement
  markStepStarted: Statement
  markStepStartedBatch: Statement
  renewLease: Statement
  complete: Statement
  completeBatch: Statement
  completeInFlight: Statement
  release: Statement
  suspend: Statement
  awaitClaim: Statement
  sweepExpired: Statement
  countStaleClaims: Statement
  countClaimsOlderThan: Statement
  /**
   * Opens the store's own transactions with its timeouts: BEGIN and two SET LOCALs, $-free, one
   * command each (a flight sends each as a statement of its own; a transaction joins them into one
   * simple query).
   */
  begin(statementTimeoutMs: number, lockTimeoutMs: number): readonly string[]
}

const ttl = (param: string) => `${param}::bigint * interval '1 millisecond'`

/** Builds the statements for one schema. `schema` is an already-quoted identifier. */
export function buildStatements(schema: string, namePrefix: string | undefined): Statements {
  const table = `${schema}.idempotency_key`
  const named = (name: string, text: string): Statement => ({
    name: namePrefix === undefined ? undefined : `${namePrefix}_${name}`,
    text,
  })
  // The row's columns with its times measured in the database's clock, for a snapshot.
  const snapshot = (k: string) => `${k}.status, ${k}.fingerprint, ${k}.claim_id::text, ${k}.fence_token::text,
      ${k}.recovery_point, ${k}.step_results, ${k}.started_steps, ${k}.response_status, ${k}.response_headers,
      ${k}.response_body, ${k}.interrupted, ${k}.outcome_error, ${k}.stale_after_ms::double precision AS stale_after_ms,
      ${millisSince(`${k}.created_at`)} AS age_ms, ${millisSince(`${k}.locked_at`)} AS lease_age_ms,
      -${millisSince(`${k}.expires_at`)} AS expires_in_ms`
  // The same columns as one JSON text (issue 21): node-postgres builds a parser and an empty row
  // object for every column of every result it receives, which for the claim's seventeen was a
  // fifteenth of a replay's CPU; one text column and JSON.parse cost a tenth of that. The body,
  // bytea, travels as base64.
  const snapshotJson = (k: string) => `json_build_object('status', ${k}.status, 'fingerprint', ${k}.fingerprint,
      'claim_id', ${k}.claim_id::text, 'fence_token', ${k}.fence_token::text, 'recovery_point', ${k}.recovery_point,
      'step_results', ${k}.step_results, 'started_steps', ${k}.started_steps, 'response_status', ${k}.response_status,
      'response_headers', ${k}.response_headers, 'response_body', encode(${k}.response_body, 'base64'),
      'interrupted', ${k}.interrupted, 'outcome_error', ${k}.outcome_error,
      'stale_after_ms', ${k}.stale_after_ms::double precision, 'age_ms', ${millisSince(`${k}.created_at`)},
      'lease_age_ms', ${millisSince(`${k}.locked_at`)}, 'expires_in_ms', -${millisSince(`${k}.expires_at`)})::text`
  const held = 'claim_id::text, fence_token::text, recovery_point, step_results, started_steps, interrupted'
  // A write that waited longer than this for a lock does nothing: its caller has given up on
  // it (lockTimeoutMs), and must not find a claim it never got back. now() is the start of the
  // statement's own transaction, taken before the lock wait even when the wait is in Parse (a
  // table lock) and Execute then restarts statement_timestamp(). $n is the timeout in ms.
  const notLate = (param: string) => `clock_timestamp() < now() + ${ttl(param)}`
  // Issue 23: the end of a claim a duplicate waits for (its row marked `awaited`) wakes the waiters
  // listening on the key channel ($n), its payload the claim id. An unmarked row notifies nobody:
  // a NOTIFY serialises commits (issue 21), so a completion nobody waits for must not send one.
  // Sent at commit, so a waiter never wakes for a completion rolled back with the caller's rows.
  const wakeWaiters = (channel: string) => `RETURNING CASE WHEN awaited THEN pg_notify(${channel}::text, claim_id::text) END AS woke`
  return {
    // Invariant 1: one statement decides ownership. $1 scope, $2 key, $3 fingerprint, $4 ttl ms,
    // $5 claim id, $6 fence token (both minted by the caller, so it recognises its own row after
    // an ambiguous error), $7 lock timeout ms, $8 the stale threshold it is made under (or NULL).
    // The row is read first, and the INSERT is tried only when the statement's snapshot has none:
    // a replay, a 409 or a 422 then costs the database a read, not a speculative insertion that
    // opens every index of the table to find the conflict (issue 21: a third more of these
    // statements per second in pgbench). Not a check-then-insert: the INSERT keeps its ON
    // CONFLICT, so the unique index still decides between claims whose snapshots found no row,
    // and a row deleted after the snapshot is reported as it was, never claimed. If the INSERT
    // loses to a row committed after the snapshot, both branches return nothing and the store
    // runs it once more.
    claim: named(
      'claim',
      `WITH existing AS MATERIALIZED (
        SELECT ${snapshotJson('k')} AS snapshot
          FROM ${table} k
         WHERE k.scope = $1 AND k.key = $2
      ), inserted AS (
        INSERT INTO ${table} AS k (scope, key, fingerprint, status, claim_id, fence_token, locked_at, expires_at, stale_after_ms)
        SELECT $1, $2, $3, 'in_progress', $5::uuid, $6::uuid, now(), now() + ${ttl('$4')}, $8::bigint
         WHERE NOT EXISTS (SELECT 1 FROM existing) AND ${notLate('$7')}
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING true
      )
      SELECT 'claimed' AS outcome, NULL::text AS snapshot FROM inserted
      UNION ALL
      SELECT 'existing', snapshot FROM existing`,
    ),
    // The same claim for several keys at once (issue 21): the claims that arrived while one was in
    // flight (natural-batch.ts) share one statement, one round trip and one commit. $1 the claims,
    // a JSON array of `ClaimBatchInput`; $2 lock timeout ms. Per claim it is the statement above:
    // its row read first (a scalar subquery, so each is one probe of the key index whatever the
    // planner thinks of the table's size), the INSERT tried only for keys the snapshot has not,
    // the unique index deciding. The rows are inserted in one order every batch follows, by scope
    // and key in bytes: two batches waiting on each other's uncommitted keys would otherwise
    // deadlock. A claim the answer leaves out (its INSERT lost to a row committed after the
    // snapshot, or to a claim of the same key earlier in this batch) is run once more by the store.
    claimBatch: named(
      'claim_batch',
      `WITH seen AS MATERIALIZED (
        SELECT i.*, (SELECT ${snapshotJson('k')} FROM ${table} k WHERE k.scope = i.scope AND k.key = i.key) AS snapshot
          FROM json_to_recordset($1::json) AS i(n integer, scope text, key text, fingerprint text, ttl_ms bigint,
                                                claim_id uuid, fence_token uuid, stale_after_ms bigint)
      ), inserted AS (
        INSERT INTO ${table} AS k (scope, key, fingerprint, status, claim_id, fence_token, locked_at, expires_at, stale_after_ms)
        SELECT s.scope, s.key, s.fingerprint, 'in_progress', s.claim_id, s.fence_token, now(), now() + ${ttl('s.ttl_ms')}, s.stale_after_ms
          FROM seen s
         WHERE s.snapshot IS NULL AND ${notLate('$2')}
         ORDER BY s.scope COLLATE "C", s.key COLLATE "C", s.n
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING k.claim_id
      )
      SELECT s.n, 'claimed' AS outcome, NULL::text AS snapshot FROM inserted JOIN seen s ON s.claim_id = inserted.claim_id
      UNION ALL
      SELECT n, 'existing', snapshot FROM seen WHERE snapshot IS NOT NULL`,
    ),
    // $1 scope, $2 key.
    readKey: named('read_key', `SELECT ${snapshot('k')} FROM ${table} k WHERE k.scope = $1 AND k.key = $2`),
    // Invariant 4: one taker. A compare-and-swap on the claim and token the caller saw,
    // re-checking staleness: of all callers that saw the same snapshot, one matches; a lease
    // renewed meanwhile matches none. Invariant 11: whatever its age, the claim keeps its
    // identity and is pushed past its TTL, so no concurrent retry sees it expired. Issue 22: a
    // held claim is stale only past the greater of the taker's threshold and the one it was made
    // under (its owner renews on that one's schedule); the taker's is recorded from now on. $1
    // scope, $2 key, $3 claim id, $4 seen token (NULL if suspended), $5 stale ms, $6 new token,
    // $7 ttl ms, $8 lock timeout ms.
    takeOver: named(
      'take_over',
      `UPDATE ${table}
          SET fence_token = $6::uuid, locked_at = now(), interrupted = true, updated_at = now(),
              expires_at = GREATEST(expires_at, now() + ${ttl('$7')}), stale_after_ms = $5::bigint
        WHERE scope = $1 AND key = $2 AND claim_id = $3::uuid AND status = 'in_progress'
          AND fence_token IS NOT DISTINCT FROM $4::uuid
          AND (fence_token IS NULL OR locked_at <= now() - ${ttl('GREATEST($5::bigint, stale_after_ms)')})
          AND ${notLate('$8')}
      RETURNING ${held}`,
    ),
    // An expired, settled key is a new request (Invariant 9): the row is reset to a fresh claim
    // with a new identity, so step keys derived from it are new at the provider too. Never an
    // `in_progress` claim (Invariant 11). A compare-and-swap on the identity seen, re-checking
    // expiry, so of concurrent reclaimers one wins. $1 scope, $2 key, $3 seen claim id,
    // $4 fingerprint, $5 ttl ms, $6 new claim id, $7 new token, $8 lock timeout ms, $9 the stale
    // threshold the new claim is made under (or NULL).
    reclaimExpired: named(
      'reclaim_expired',
      `UPDATE ${table}
          SET fingerprint = $4, status = 'in_progress', claim_id = $6::uuid, stale_after_ms = $9::bigint,
              fence_token = $7::uuid, locked_at = now(), recovery_point = NULL,
              step_results = '{}'::jsonb, started_steps = '{}', interrupted = false, outcome_error = NULL, awaited = false,
              response_status = NULL, response_headers = NULL, response_body = NULL,
              created_at = now(), updated_at = now(), expires_at = now() + ${ttl('$5')}
        WHERE scope = $1 AND key = $2 AND claim_id = $3::uuid AND status <> 'in_progress'
          AND expires_at <= now() AND ${notLate('$8')}
      RETURNING ${held}`,
    ),
    // Invariant 3 for every statement below: it matches only while the writer's token does.
    // $1 scope, $2 key, $3 token, $4 step, $5 result as JSON text, $6 the deferred results it carries.
    commitStep: named(
      'commit_step',
      `UPDATE ${table}
          SET recovery_point = $4, step_results = step_results || $6::jsonb || jsonb_build_object($4::text, $5::jsonb),
              locked_at = now(), updated_at = now()
        WHERE scope = $1 AND key = $2 AND fence_token = $3::uuid AND status = 'in_progress'`,
    ),
    // Issue 9: an at-most-once step is recorded before its function runs. $4 step; $5 the deferred
    // results it carries (issue 11) and $6 their last, the new recovery point (NULL: none).
    markStepStarted: named(
      'mark_step_started',
      `UPDATE ${table}
          SET started_steps = ${appendOnce('started_steps', '$4::text')}, step_results = step_results || $5::jsonb,
              recovery_point = COALESCE($6::text, recovery_point), locked_at = now(), updated_at = now()
        WHERE scope = $1 AND key = $2 AND fence_token = $3::uuid AND status = 'in_progress'`,
    ),
    // The same step writes for several keys at once (issue 21), like `completeBatch`: $1 a JSON
    // array of `StepBatchInput`, each the fenced update above with the same values as text. A
    // write whose token no longer holds its claim matches nothing and is left out of the answer.
    // A batch never holds two writes to one row (an UPDATE … FROM applies one of them only):
    // the store sends a row's second write after the batch.
    commitStepBatch: named(
      'commit_step_batch',
      `UPDATE ${table} k
          SET recovery_point = i.step, step_results = k.step_results || i.carried::jsonb || jsonb_build_object(i.step, i.result::jsonb),
              locked_at = now(), updated_at = now()
         FROM json_to_recordset($1::json) AS i(n integer, scope text, key text, fence_token uuid, step text, carried text, result text)
        WHERE k.scope = i.scope AND k.key = i.key AND k.fence_token = i.fence_token AND k.status = 'in_progress'
      RETURNING i.n`,
    ),
    markStepStartedBatch: named(
      'mark_step_started_batch',
      `UPDATE ${table} k
          SET started_steps = ${appendOnce('k.started_steps', 'i.step')}, step_results = k.step_results || i.carried::jsonb,
              recovery_point = COALESCE(i.recovery_point, k.recovery_point), locked_at = now(), updated_at = now()
         FROM json_to_recordset($1::json) AS i(n integer, scope text, key text, fence_token uuid, step text, carried text, recovery_point text)
        WHERE k.scope = i.scope AND k.key = i.key AND k.fence_token = i.fence_token AND k.status = 'in_progress'
      RETURNING i.n`,
    ),
    // $1 scope, $2 key, $3 token, $4 ttl ms: a live claim never expires under its owner.
    renewLease: named(
      'renew_lease',
      `UPDATE ${table}
          SET locked_at = now(), expires_at = GREATEST(expires_at, now() + ${ttl('$4')})
        WHERE scope = $1 AND key = $2 AND fence_token = $3::uuid AND status = 'in_progress'`,
    ),
    // $1 scope, $2 key, $3 token, $4 status, $5 response status, $6 headers JSON, $7 body bytes,
    // $8 the key channel. The token stays on the settled row (no fenced statement matches a settled
    // row), so a worker whose answer was lost recognises its own completion when it reads the row back.
    complete: named(
      'complete',
      `UPDATE ${table}
          SET status = $4, response_status = $5, response_headers = $6::jsonb, response_body = $7,
              locked_at = NULL, outcome_error = NULL, updated_at = now()
        WHERE scope = $1 AND key = $2 AND fence_token = $3::uuid AND status = 'in_progress'
      ${wakeWaiters('$8')}`,
    ),
    // The same completion for several keys at once (issue 21): the completions that arrived while
    // one was in flight share one statement, one round trip and one commit. $1 the completions, a
    // JSON array of `CompletionBatchInput` (each body in base64); $2 the key channel. Each is the
    // fenced update above: a completion whose token no longer holds its claim matches nothing and
    // is left out of the answer. Two batches never hold the same claim's token, so they meet on a
    // row only when a claim was taken over while its old owner completed; a deadlock there is
    // transient, and the fenced write retried.
    completeBatch: named(
      'complete_batch',
      `UPDATE ${table} k
          SET status = i.status, response_status = i.response_status, response_headers = i.response_headers,
              response_body = decode(i.response_body, 'base64'), locked_at = NULL, outcome_error = NULL, updated_at = now()
         FROM json_to_recordset($1::json) AS i(n integer, scope text, key text, fence_token uuid, status text,
                                                response_status integer, response_headers jsonb, response_body text)
        WHERE k.scope = i.scope AND k.key = i.key AND k.fence_token = i.fence_token AND k.status = 'in_progress'
      RETURNING i.n, CASE WHEN k.awaited THEN pg_notify($2::text, k.claim_id::text) END AS woke`,
    ),
    // The same completion for a flight (BEGIN, this, the writes, COMMIT sent together, issue 11):
    // nothing waits for its row count before the COMMIT, so a lost fence must abort the
    // transaction itself: oncely_fence_lost (migration 005) fails with SQLSTATE ON001
    // (SQLSTATE.fenceLost), called only when the update matched no row.
    completeInFlight: named(
      'complete_in_flight',
      `WITH done AS (
         UPDATE ${table}
            SET status = $4, response_status = $5, response_headers = $6::jsonb, response_body = $7,
                locked_at = NULL, outcome_error = NULL, updated_at = now()
          WHERE scope = $1 AND key = $2 AND fence_token = $3::uuid AND status = 'in_progress'
         ${wakeWaiters('$8')}
       )
       SELECT CASE WHEN count(*) = 1 THEN true
                   ELSE ${schema}.oncely_fence_lost(count(*))
              END AS completed
         FROM done`,
    ),
    // $1 scope, $2 key, $3 token, $4 the key channel. Invariant 11: an interrupted claim is never deleted.
    release: named(
      'release',
      `DELETE FROM ${table}
        WHERE scope = $1 AND key = $2 AND fence_token = $3::uuid AND status = 'in_progress' AND NOT interrupted
      ${wakeWaiters('$4')}`,
    ),
    // Keeps locked_at, so a suspended claim nobody retries still shows as stuck. $4 the error that
    // kept the outcome from being stored, or NULL; $5 the key channel.
    suspend: named(
      'suspend',
      `UPDATE ${table}
          SET fence_token = NULL, interrupted = true, outcome_error = $4, updated_at = now()
        WHERE scope = $1 AND key = $2 AND fence_token = $3::uuid AND status = 'in_progress'
      ${wakeWaiters('$5')}`,
    ),
    // Issue 23: a waiting duplicate marks the claim it waits for, so its end notifies (above). Only
    // that claim, still running, and only once: the waiters after the first write nothing. True when
    // the claim is marked; false when it has ended or changed (or a concurrent mark committed after
    // this statement's snapshot: the waiter then reads once more). $1 scope, $2 key, $3 claim id.
    awaitClaim: named(
      'await_claim',
      `WITH marked AS (
         UPDATE ${table} SET awaited = true
          WHERE scope = $1 AND key = $2 AND claim_id = $3::uuid AND status = 'in_progress' AND NOT awaited
         RETURNING 1
       )
       SELECT EXISTS (SELECT 1 FROM marked)
           OR EXISTS (SELECT 1 FROM ${table}
                       WHERE scope = $1 AND key = $2 AND claim_id = $3::uuid AND status = 'in_progress' AND awaited) AS marked`,
    ),
    // Invariant 9: a small batch, skipping rows another transaction holds. Invariant 11: only
    // settled keys; a running claim past its TTL is the reconciler's. $1 batch size.
    // The batch is deleted by row identity (tableoid, ctid), not by joining its keys back: the
    // planner costs a join by key against a partitioned table as a probe of every partition and
    // hashes the whole expired backlog instead, which made a batch 20x slower on 16 partitions
    // and grew with the backlog (docs/scale-out.md). FOR UPDATE re-checks the batch's conditions
    // on the newest version of each row and holds its lock to the end, so the version deleted is
    // the one checked: a key reclaimed before the lock is no longer expired, one reclaimed after
    // it waits. The scope lets each probe prune to its row's partition. Sent unnamed, so it is
    // planned with its batch size every time: a generic plan of LIMIT $1 hashes the whole table.
    sweepExpired: {
      name: undefined,
      text: `WITH batch AS (
         SELECT tableoid, ctid, scope FROM ${table}
          WHERE expires_at <= now() AND status <> 'in_progress'
          ORDER BY expires_at
          LIMIT $1
          FOR UPDATE SKIP LOCKED
       )
       DELETE FROM ${table} k USING batch b
        WHERE k.scope = b.scope AND k.tableoid = b.tableoid AND k.ctid = b.ctid`,
    },
    // $1 stale ms. Running claims whose lease is older than the threshold: the operations stuck now.
    countStaleClaims: named(
      'count_stale_claims',
      `SELECT count(*)::integer AS count FROM ${table}
        WHERE status = 'in_progress' AND locked_at <= now() - ${ttl('$1')}`,
    ),
    // $1 age ms. Running claims created longer ago than this, renewed or not: a hung handler
    // keeps its lease fresh but still ages (issue 8, path 13).
    countClaimsOlderThan: named(
      'count_claims_older_than',
      `SELECT count(*)::integer AS count FROM ${table}
        WHERE status = 'in_progress' AND created_at <= now() - ${ttl('$1')}`,
    ),
    // Issue 8: the store's own transactions never wait forever behind a lock. Both values are
    // integers validated at start-up; SET takes no bound parameters.
    begin: (statementTimeoutMs, lockTimeoutMs) => ['BEGIN', `SET LOCAL statement_timeout = ${Math.trunc(statementTimeoutMs)}`, `SET LOCAL lock_timeout = ${Math.trunc(lockTimeoutMs)}`],
  }
}

/**
 * `array` with `value` appended unless it holds it already: a mark sent again after its answer
 * was lost (the fenced writer repeats it, it landed the first time) records its step once.
 */
function appendOnce(array: string, value: string): string {
  return `CASE WHEN ${value} = ANY(${array}) THEN ${array} ELSE array_append(${array}, ${value}) END`
}

function millisSince(column: string): string {
  return `(EXTRACT(EPOCH FROM (now() - ${column})) * 1000)::double precision`
}
