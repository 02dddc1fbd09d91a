-- oncely:breaking
-- One name per concept, down to the columns (issue 24): the key table's columns take the names
-- the engine, the docs and the console use. An older oncely reads the old names, so this is
-- breaking: a process of that version refuses to start on the schema after it
-- (ONCELY_SCHEMA_TOO_NEW) instead of failing statement by statement; stop the old processes
-- before it runs (docs/operations.md, "Upgrading"). A rename changes only the catalog: no row is
-- rewritten, the primary key, the indexes and a hash partitioning by scope follow it.
ALTER TABLE {{schema}}.idempotency_key RENAME COLUMN user_id TO scope;
ALTER TABLE {{schema}}.idempotency_key RENAME COLUMN request_hash TO fingerprint;
ALTER TABLE {{schema}}.idempotency_key RENAME COLUMN lock_token TO fence_token;
ALTER TABLE {{schema}}.idempotency_key RENAME COLUMN phase_data TO step_results;
