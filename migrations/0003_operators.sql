-- leasehold schema, version 3: operators' controls (pause, run history,
-- catch-up across missed slots).
--
-- Every statement is safe to run while replicas of the previous version are
-- running: columns are added with constant defaults (no table rewrite), and
-- the new tables are only read by this version.

-- job_name: the job a key belongs to, written by registrations and claims,
--   so a whole job can be paused and history rows carry it. NULL on rows
--   last written by an older version, until their next claim.
-- slot_at: the scheduled slot the key's next run is for. next_due_at says
--   when the key may be claimed; a failed run's retry moves next_due_at but
--   keeps slot_at, so catch-up knows which slot is still owed. NULL on older
--   rows: read as next_due_at.
-- runs: how many runs were claimed for this key; a run's number picks its
--   place in the history ring (leasehold_run.slot).
ALTER TABLE leasehold_lease
    ADD COLUMN IF NOT EXISTS job_name TEXT,
    ADD COLUMN IF NOT EXISTS slot_at  TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS runs     BIGINT NOT NULL DEFAULT 0;

-- Pauses, fleet-wide and durable: a key whose own name, or whose job's
-- name, has a row here is never claimed. `cancel` asks the runs in progress
-- to stop at their next renewal. Rows are deleted by a resume.
CREATE TABLE IF NOT EXISTS leasehold_pause (
    scope     TEXT        NOT NULL CHECK (scope IN ('key', 'job')),
    name      TEXT        NOT NULL CHECK (name <> '' AND octet_length(name) <= 255),
    cancel    BOOLEAN     NOT NULL DEFAULT false,
    paused_by TEXT        NOT NULL CHECK (octet_length(paused_by) <= 255),
    paused_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (scope, name)
);

-- Run history: a ring of rows per key. A run's row sits at
-- slot = run number mod the configured length (default 100), written by the
-- statement that releases the run, overwriting the run that many runs
-- older. So the table holds at most (keys x ring length) rows, and keeping
-- it bounded costs one row write per run: no pruning scan, ever.
CREATE TABLE IF NOT EXISTS leasehold_run (
    key         TEXT        NOT NULL,
    slot        INTEGER     NOT NULL CHECK (slot >= 0),
    run_no      BIGINT      NOT NULL,
    job_name    TEXT,
    fence       BIGINT      NOT NULL,
    holder      TEXT        NOT NULL,
    -- The schedule slot the run was for; NULL for a triggered or manual run.
    scheduled_for TIMESTAMPTZ,
    started_at  TIMESTAMPTZ NOT NULL,
    ended_at    TIMESTAMPTZ NOT NULL,
    outcome     TEXT        NOT NULL
        CHECK (outcome IN ('succeeded', 'failed', 'cancelled', 'panicked', 'skipped')),
    -- Why a cancelled run stopped (stolen, expired, deadline, shutdown, paused).
    reason      TEXT,
    -- The job's error or panic message, truncated.
    error       TEXT,
    PRIMARY KEY (key, slot)
)
-- A run's row overwrites one in place: keep room for HOT updates.
WITH (fillfactor = 80);

INSERT INTO leasehold_schema_version (version, description)
VALUES (3, 'pauses, run history ring, job names and pending slots on leases')
ON CONFLICT (version) DO NOTHING;
