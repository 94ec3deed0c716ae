-- leasehold schema, version 13: the time limit of the run a lease row's
-- tenure is for (`JobSettings::timeout`, docs/design.md §6).
--
-- The runtime's batch claim writes the limit of the run it starts, in
-- seconds (NULL: no limit), with the rest of the tenure, so `leasehold
-- status` and the console show how long each run has been going against
-- its limit without knowing the replica's settings. The limit itself is
-- enforced by the replica that runs the key, on its own monotonic clock:
-- nothing in the database depends on this column.
--
-- Safe to apply while replicas of version 12 run: a nullable column they
-- neither read nor write. Their runs show no limit.
ALTER TABLE leasehold_lease ADD COLUMN IF NOT EXISTS run_timeout_secs DOUBLE PRECISION
    CONSTRAINT leasehold_lease_run_timeout_valid CHECK (run_timeout_secs > 0);

INSERT INTO leasehold_schema_version (version, description)
VALUES (13, 'the time limit of the run a lease is held for, for status and the console')
ON CONFLICT (version) DO NOTHING;
