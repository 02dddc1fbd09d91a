-- The stale threshold a claim was made under (issue 22): a claim is taken over only once its
-- lease is older than this and than the taker's own threshold, so a process run with a smaller
-- one (`oncely reconcile --stale-after-ms`, another service's engine) never takes a claim from an
-- owner that still renews it on its own schedule. NULL for claims made by an older oncely: their
-- takers judge by their own threshold, as before. Additive: an older oncely never reads it.
ALTER TABLE {{schema}}.idempotency_key
  ADD COLUMN stale_after_ms bigint CHECK (stale_after_ms > 0);
