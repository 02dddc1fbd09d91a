-- A duplicate waiting for a claim in flight (`waitMs`, issue 23) marks the claim's row, and only
-- the completion, release or suspension of a marked row sends a NOTIFY (the payload is the claim
-- id) to wake the waiters listening: a completion nobody waits for notifies nobody, since a
-- NOTIFY serialises commits (issue 21). The mark is a hint; the waiters' reads stay the truth.
-- Additive: an older oncely neither sets nor reads it (the default answers for its inserts).
ALTER TABLE {{schema}}.idempotency_key ADD COLUMN awaited boolean NOT NULL DEFAULT false;
