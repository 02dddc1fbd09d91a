-- The record of one idempotency key (DESIGN.md, "The record"). Keyed by scope and key, never
-- by key alone.
CREATE TABLE {{schema}}.idempotency_key (
  user_id          text        NOT NULL,
  key              text        NOT NULL,
  request_hash     text        NOT NULL,
  status           text        NOT NULL CHECK (status IN ('in_progress', 'completed', 'failed')),
  -- The claim's identity: kept by a take-over, new when an expired key is claimed again.
  claim_id         uuid        NOT NULL,
  recovery_point   text,
  phase_data       jsonb       NOT NULL DEFAULT '{}'::jsonb,
  -- The fence token. A uuid, read as text, so it round-trips exactly (a timestamptz through a
  -- JavaScript Date loses its microseconds). NULL while a suspended claim waits for a retry.
  lock_token       uuid,
  locked_at        timestamptz,
  response_status  integer,
  -- [[name, value], ...] in the order first sent; a jsonb array keeps its order.
  response_headers jsonb,
  -- The body's exact bytes: a jsonb column would reorder keys.
  response_body    bytea,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  expires_at       timestamptz NOT NULL,
  PRIMARY KEY (user_id, key),
  CONSTRAINT idempotency_key_final_has_response
    CHECK (status = 'in_progress' OR (response_status IS NOT NULL AND response_body IS NOT NULL))
);

CREATE INDEX idempotency_key_expires_at ON {{schema}}.idempotency_key (expires_at);

-- The reconciler and the stuck-keys gauge look only at running claims.
CREATE INDEX idempotency_key_in_progress_locked_at ON {{schema}}.idempotency_key (locked_at)
  WHERE status = 'in_progress';
