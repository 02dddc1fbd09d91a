-- The transactional outbox (Invariants 8 and 13): events written in the transaction that
-- completes a key, published at least once by a relay, then pruned after a retention window.
CREATE TABLE {{schema}}.outbox (
  -- UUIDv7, minted in JavaScript: unique, roughly time-ordered; not used for ordering.
  id            uuid        PRIMARY KEY,
  -- Per-key publish order. Taken inside enqueue while the transaction holds an advisory lock
  -- on the ordering key until it commits, so for one key it follows commit order.
  seq           bigint      NOT NULL GENERATED ALWAYS AS IDENTITY,
  type          text        NOT NULL,
  -- Events with the same ordering key are published in seq order; NULL: no ordering.
  ordering_key  text,
  -- The payload's exact JSON text, published as it was written (a jsonb column reorders keys).
  payload       text        NOT NULL,
  headers       jsonb       NOT NULL DEFAULT '{}'::jsonb,
  occurred_at   timestamptz NOT NULL,
  status        text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'dead')),
  attempts      integer     NOT NULL DEFAULT 0,
  -- Not claimed before this time: the backoff after a failed publish.
  available_at  timestamptz NOT NULL DEFAULT now(),
  -- The lease of the relay batch that claimed the row; another relay takes it once it passes.
  lease_token   uuid,
  leased_until  timestamptz,
  last_error    text,
  sent_at       timestamptz,
  created_at    timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT outbox_seq_unique UNIQUE (seq)
);

-- The relay's candidates: rows still to publish, in order.
CREATE INDEX outbox_pending_seq ON {{schema}}.outbox (seq) WHERE status = 'pending';

-- "Is an earlier event of this key still unsent?": only unsent rows, so it stays small.
CREATE INDEX outbox_unsent_key_seq ON {{schema}}.outbox (ordering_key, seq) WHERE status <> 'sent';

-- Pruning sent rows after the retention window, in small batches.
CREATE INDEX outbox_sent_at ON {{schema}}.outbox (sent_at) WHERE status = 'sent';

-- The deduping inbox: one row per (consumer, event id) an event handler has applied, written in
-- the consumer's own transaction (Invariant 13).
CREATE TABLE {{schema}}.inbox (
  consumer     text        NOT NULL,
  event_id     text        NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, event_id)
);

CREATE INDEX inbox_processed_at ON {{schema}}.inbox (processed_at);
