-- leasehold schema, version 13: time limits per run (`JobSettings::timeout`,
-- docs/design.md §6): a key of a job kind may have its own, and a lease
-- row says the limit of the run its tenure is for.
--
-- `leasehold_key.timeout_secs` is a stored key's own limit in seconds
-- (NULL: its kind's), written by `add_keys` and `update_key`, read by every
-- replica that runs the kind.
--
-- The runtime's batch claim writes the limit of the run it starts, in
-- seconds (NULL: no limit), with the rest of the tenure, so `leasehold
-- status` and the console show how long each run has been going against
-- its limit without knowing the replica's settings. The limit itself is
-- enforced by the replica that runs the key, on its own monotonic clock:
-- nothing in the database depends on this column.
--
-- Safe to apply while replicas of version 12 run: nullable columns they
-- neither read nor write. Their runs show no limit, and they run every key
-- with its kind's limit.
ALTER TABLE leasehold_key ADD COLUMN IF NOT EXISTS timeout_secs DOUBLE PRECISION
    CONSTRAINT leasehold_key_timeout_valid CHECK (timeout_secs > 0);

ALTER TABLE leasehold_lease ADD COLUMN IF NOT EXISTS run_timeout_secs DOUBLE PRECISION
    CONSTRAINT leasehold_lease_run_timeout_valid CHECK (run_timeout_secs > 0);

INSERT INTO leasehold_schema_version (version, description)
VALUES (13, 'time limits per run: a stored key''s own, and the one of the run a lease is held for')
ON CONFLICT (version) DO NOTHING;
