/**
 * The statements of the outbox, its relay and the inbox (docs/conventions.md, SQL, split from statements.ts
 * by area). Values are always bound; only the schema identifier, quoted once at option
 * resolution, is interpolated.
 */
import type { QueryConfig } from './executor.js'
import { quoteIdentifier } from './quote-identifier.js'
import type { Statement } from './statements.js'

/** One claimed event, as the relay publishes it. */
export interface OutboxEventRow {
  id: string
  /** bigint as text: the per-key order. */
  seq: string
  type: string
  ordering_key: string | null
  payload: string
  headers: Record<string, string>
  occurred_at: Date
  /** Attempts including the one this claim starts. */
  attempts: number
}

/** One event as `oncely outbox list` shows it. */
export interface OutboxListRow {
  id: string
  seq: string
  type: string
  ordering_key: string | null
  status: 'pending' | 'sent' | 'dead'
  attempts: number
  last_error: string | null
  occurred_at: Date
  available_at: Date
}

export interface OutboxBacklogRow {
  pending: number
  dead: number
  /** Seconds since the oldest pending event occurred; 0 when none waits. */
  oldest_pending_age_seconds: number
}

export interface OutboxStatements {
  /** In a transaction: fails with SQLSTATE 25P01 outside a transaction block. */
  savepoint: Statement
  releaseSavepoint: Statement
  enqueue: Statement
  enqueueAndNotify: Statement
  claimHeads: Statement
  claimFollowers: Statement
  markSent: Statement
  markFailed: Statement
  releaseLeases: Statement
  listByStatus: Statement
  retryDead: Statement
  retryAllDead: Statement
  deadBefore: Statement
  pruneSent: Statement
  backlog: Statement
  inboxInsert: Statement
  inboxPrune: Statement
}

const ms = (param: string) => `${param}::bigint * interval '1 millisecond'`

/**
 * The NOTIFY channel of one schema's outbox. PostgreSQL refuses a channel over 63 bytes
 * (`channel name too long`), so a long name is cut to 63 bytes, between characters: a cut by
 * UTF-16 units left a schema with a long non-ASCII name unable to enqueue.
 */
export function outboxChannel(schemaName: string): string {
  const channel = `oncely_outbox:${schemaName}`
  let bytes = 0
  let end = 0
  for (const character of channel) {
    bytes += Buffer.byteLength(character)
    if (bytes > MAX_CHANNEL_BYTES) break
    end += character.length
  }
  return channel.slice(0, end)
}

const MAX_CHANNEL_BYTES = 63

/**
 * The relay's wake-up connection subscribes with `listen` and leaves with `unlisten`. A channel
 * is an identifier, quoted like a schema name; NOTIFY itself binds it (`pg_notify($7, '')`).
 */
export function buildListenStatements(channel: string): { listen: string; unlisten: string } {
  const quoted = quoteIdentifier('channel', channel)
  return { listen: `LISTEN ${quoted}`, unlisten: `UNLISTEN ${quoted}` }
}

const EVENT_COLUMNS = `id::text, seq::text, type, ordering_key, payload, headers, occurred_at, attempts`

/**
 * Takes the ordering locks of the keys in $1 (a text array) one after another, in the order of
 * the lock's own key (the enqueue's `hashtext` of the ordering key), the same order in every
 * transaction of every process. A transaction that holds several keys' locks takes them all at
 * once with this, before any of its events: two such transactions then wait for each other's
 * first lock at worst, and cannot deadlock on these locks (issue 21: flights that share a
 * transaction). A key's lock is taken again by its event's own insert, which already holds it.
 * Unnamed: it holds no table, so it is the same in every schema, and is planned in a few µs.
 */
export const LOCK_ORDERING_KEYS = `SELECT pg_advisory_xact_lock(hashtext('oncely:outbox'), h)
  FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($1::text[]) AS k ORDER BY h) AS sorted`

/** Builds the statements for one schema. `schema` is an already-quoted identifier. */
export function buildOutboxStatements(schema: string, namePrefix: string | undefined): OutboxStatements {
  const outbox = `${schema}.outbox`
  const inbox = `${schema}.inbox`
  const named = (name: string, text: string): Statement => ({
    name: namePrefix === undefined ? undefined : `${namePrefix}_${name}`,
    text,
  })
  // Unnamed, so planned at every run for the outbox as it is then. A prepared statement keeps the
  // plan made after its fifth run: for the followers and the marks, made while the outbox was
  // small, that was a sequential scan (a hash join for the followers) which then read every event
  // kept, sent ones included, at every batch (issue 21; test/outbox/relay-plans.test.ts). Planning
  // costs about 0.1–0.4 ms a batch; the heads' plan, an ordered scan of the pending index, holds.
  const plannedEachRun = (text: string): Statement => ({ name: undefined, text })
  // The ordering key's lock is held until the writing transaction ends, and the row's seq is
  // taken after it: two transactions writing events of one key take their seqs in the order
  // they commit. An event with no key locks on its own id (never contended).
  const lockThenInsert = (notify: boolean) => `
    WITH locked AS MATERIALIZED (
      SELECT pg_advisory_xact_lock(hashtext('oncely:outbox'), hashtext(coalesce($3::text, $1::text)))
             ${notify ? `, pg_notify($7, '')` : ''}
    )
    INSERT INTO ${outbox} (id, type, ordering_key, payload, headers, occurred_at)
    SELECT $1::uuid, $2, $3, $4, $5::jsonb, $6::timestamptz FROM locked`
  return {
    // Unnamed: sent without parameters, on the simple protocol, by every driver.
    savepoint: { name: undefined, text: 'SAVEPOINT oncely_in_transaction' },
    releaseSavepoint: { name: undefined, text: 'RELEASE SAVEPOINT oncely_in_transaction' },
    // $1 id, $2 type, $3 ordering key, $4 payload JSON text, $5 headers JSON, $6 occurred at.
    enqueue: named('enqueue', lockThenInsert(false)),
    // The same, and a NOTIFY on channel $7 (delivered at commit; it serialises commits).
    enqueueAndNotify: named('enqueue_notify', lockThenInsert(true)),
    // Heads: pending, due, unleased events with no earlier unsent event of their key (a dead
    // one included: it blocks its key until re-queued). SKIP LOCKED keeps concurrent relays
    // apart; the earlier-event check keeps a relay from taking event 2 of a key while another
    // holds event 1. $1 limit, $2 lease token, $3 lease ms.
    claimHeads: named(
      'claim_heads',
      `WITH heads AS (
         SELECT o.id FROM ${outbox} o
          WHERE o.status = 'pending' AND o.available_at <= now()
            AND (o.leased_until IS NULL OR o.leased_until <= now())
            AND NOT EXISTS (
              SELECT 1 FROM ${outbox} e
               WHERE e.ordering_key = o.ordering_key AND e.seq < o.seq AND e.status <> 'sent')
          ORDER BY o.seq
          LIMIT $1
          FOR UPDATE SKIP LOCKED
       )
       UPDATE ${outbox} o
          SET lease_token = $2::uuid, leased_until = now() + ${ms('$3')}, attempts = o.attempts + 1
         FROM heads WHERE o.id = heads.id
       RETURNING ${EVENT_COLUMNS.split(', ').map((column) => `o.${column}`).join(', ')}`,
    ),
    // Followers: behind each head this batch holds, the contiguous run of due, unleased pending
    // events of the key, at most $5 per key. Nobody else can take them: their head is unsent.
    // $1 head keys, $2 head seqs, $3 lease token, $4 lease ms, $5 per-key limit. Each key's first
    // $5 unsent events are read in seq order, under a LIMIT (no row number needed to keep to it),
    // and the rows to lease found by id: a join of the heads to every unsent event of their keys
    // was planned, on an outbox not yet analysed (`status <> 'sent'` then taken to hold for nearly
    // every row), as a sequential scan of the whole table once a batch held many keys (issue 21).
    claimFollowers: plannedEachRun(
      `WITH candidates AS (
         SELECT f.id, f.ordering_key, f.seq,
                bool_and(f.status = 'pending' AND f.available_at <= now() AND (f.leased_until IS NULL OR f.leased_until <= now()))
                  OVER (PARTITION BY f.ordering_key ORDER BY f.seq) AS runs_on
           FROM unnest($1::text[], $2::bigint[]) AS h(ordering_key, seq)
           CROSS JOIN LATERAL (
             SELECT u.id, u.ordering_key, u.seq, u.status, u.available_at, u.leased_until
               FROM ${outbox} u
              WHERE u.ordering_key = h.ordering_key AND u.seq > h.seq AND u.status <> 'sent'
              ORDER BY u.seq
              LIMIT $5
           ) f
       )
       UPDATE ${outbox} o
          SET lease_token = $3::uuid, leased_until = now() + ${ms('$4')}, attempts = o.attempts + 1
        WHERE o.id = ANY(ARRAY(SELECT c.id FROM candidates c WHERE c.runs_on))
       RETURNING ${EVENT_COLUMNS.split(', ').map((column) => `o.${column}`).join(', ')}`,
    ),
    // Fenced by the batch's lease token: a batch whose lease another relay took marks nothing.
    // $1 ids, $2 lease token.
    markSent: plannedEachRun(
      `UPDATE ${outbox}
          SET status = 'sent', sent_at = now(), lease_token = NULL, leased_until = NULL, last_error = NULL
        WHERE id = ANY($1::uuid[]) AND lease_token = $2::uuid`,
    ),
    // $1 id, $2 lease token, $3 max attempts, $4 backoff ms, $5 error text.
    markFailed: named(
      'mark_failed',
      `UPDATE ${outbox}
          SET status = CASE WHEN attempts >= $3 THEN 'dead' ELSE 'pending' END,
              available_at = now() + ${ms('$4')}, last_error = $5,
              lease_token = NULL, leased_until = NULL
        WHERE id = $1::uuid AND lease_token = $2::uuid
      RETURNING status`,
    ),
    // Claimed but not attempted (an earlier event of the key failed): the attempt is given back.
    // $1 ids, $2 lease token.
    releaseLeases: plannedEachRun(
      `UPDATE ${outbox}
          SET lease_token = NULL, leased_until = NULL, attempts = greatest(attempts - 1, 0)
        WHERE id = ANY($1::uuid[]) AND lease_token = $2::uuid`,
    ),
    // $1 status, $2 limit.
    listByStatus: named(
      'list_by_status',
      `SELECT id::text, seq::text, type, ordering_key, status, attempts, last_error, occurred_at, available_at
         FROM ${outbox} WHERE status = $1 ORDER BY seq LIMIT $2`,
    ),
    // $1 id, $2 the oldest age in ms an event may have to be re-queued (NULL: any). Re-queued with
    // a fresh attempt count; it keeps its seq, so its key's order holds. Issue 22: an event older
    // than the consumers' inbox rows may have been applied already, its row since pruned.
    retryDead: named(
      'retry_dead',
      `UPDATE ${outbox}
          SET status = 'pending', attempts = 0, available_at = now(), last_error = NULL
        WHERE id = $1::uuid AND status = 'dead' AND ($2::bigint IS NULL OR created_at > now() - ${ms('$2')})
      RETURNING id::text`,
    ),
    // $1 as $2 above.
    retryAllDead: named(
      'retry_all_dead',
      `UPDATE ${outbox}
          SET status = 'pending', attempts = 0, available_at = now(), last_error = NULL
        WHERE status = 'dead' AND ($1::bigint IS NULL OR created_at > now() - ${ms('$1')})
      RETURNING id::text`,
    ),
    // The dead events at least $1 ms old, among the ids $2 (NULL: all): those re-queue refuses.
    deadBefore: named(
      'dead_before',
      `SELECT id::text FROM ${outbox}
        WHERE status = 'dead' AND created_at <= now() - ${ms('$1')} AND ($2::uuid[] IS NULL OR id = ANY($2::uuid[]))
        ORDER BY seq`,
    ),
    // Invariant 9's habit for the outbox: small batches that skip locked rows. $1 retention ms, $2 batch.
    pruneSent: named(
      'prune_sent',
      `DELETE FROM ${outbox} WHERE id IN (
         SELECT id FROM ${outbox}
          WHERE status = 'sent' AND sent_at <= now() - ${ms('$1')}
          ORDER BY sent_at LIMIT $2
          FOR UPDATE SKIP LOCKED)`,
    ),
    backlog: named(
      'backlog',
      `SELECT count(*) FILTER (WHERE status = 'pending')::integer AS pending,
              count(*) FILTER (WHERE status = 'dead')::integer AS dead,
              coalesce(extract(epoch FROM now() - min(occurred_at) FILTER (WHERE status = 'pending')), 0)::float8
                AS oldest_pending_age_seconds
         FROM ${outbox} WHERE status <> 'sent'`,
    ),
    // Invariant 13: one row per applied event; the handler runs only when this inserted it.
    // $1 consumer, $2 event id.
    inboxInsert: named(
      'inbox_insert',
      `INSERT INTO ${inbox} (consumer, event_id) VALUES ($1, $2) ON CONFLICT (consumer, event_id) DO NOTHING`,
    ),
    // $1 older than ms, $2 batch size.
    inboxPrune: named(
      'inbox_prune',
      `DELETE FROM ${inbox} WHERE ctid IN (
         SELECT ctid FROM ${inbox} WHERE processed_at <= now() - ${ms('$1')}
          ORDER BY processed_at LIMIT $2)`,
    ),
  }
}

/** A statement with its values, as `Queryable.query` takes it (no `name` key when unnamed). */
export function bind(statement: Statement, values: unknown[]): QueryConfig {
  return statement.name === undefined ? { text: statement.text, values } : { name: statement.name, text: statement.text, values }
}
