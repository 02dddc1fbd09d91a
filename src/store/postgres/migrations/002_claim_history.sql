-- What a claim went through, kept across take-overs (issue 8).
ALTER TABLE {{schema}}.idempotency_key
  -- Invariant 11: a claim that was ever taken over or suspended may have been acted on (a step
  -- entered but not committed), so it is never deleted; set by take-over and suspend, cleared
  -- only when an expired, settled key is claimed again under a new identity.
  ADD COLUMN interrupted   boolean NOT NULL DEFAULT false,
  -- At-most-once steps recorded as started before their function ran: a take-over skips them.
  ADD COLUMN started_steps text[]  NOT NULL DEFAULT '{}',
  -- Why the outcome could not be stored (a deterministic failure of the completion); the claim
  -- stays suspended and listed as stuck until an operator fixes the cause and a retry resumes it.
  ADD COLUMN outcome_error text;
