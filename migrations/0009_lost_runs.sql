-- leasehold schema, version 9: runs that end by incident are on the record.
--
-- `run_open` says the lease row's current tenure is a run whose release has
-- not been written: set by the runtime's claim of a run, cleared by its
-- release. A claim that takes a key over while it is still set knows that
-- the previous run ended without a release — its replica crashed, froze
-- past its lease, or could not write its release — and writes that run's
-- history row, outcome `lost`, in the same statement.
--
-- Safe to apply while replicas of version 8 run: a column with a constant
-- default (no table rewrite) that they neither read nor write, and an
-- outcome they never write. A version-8 replica's release does not clear
-- `run_open`; the claim after it then finds the run's own row at its ring
-- place and writes nothing (a ring place only takes a newer run).
ALTER TABLE leasehold_lease ADD COLUMN IF NOT EXISTS run_open BOOLEAN NOT NULL DEFAULT false;

ALTER TABLE leasehold_run DROP CONSTRAINT IF EXISTS leasehold_run_outcome_check;
ALTER TABLE leasehold_run ADD CONSTRAINT leasehold_run_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'cancelled', 'panicked', 'skipped', 'lost'));

INSERT INTO leasehold_schema_version (version, description)
VALUES (9, 'runs that ended without a release are recorded as lost by the claim that takes their key over')
ON CONFLICT (version) DO NOTHING;
