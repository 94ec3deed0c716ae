-- leasehold schema, version 14: a fleet-wide limit per job (issue 44,
-- docs/design.md §4, "Fleet-wide limits"; the mechanism is model-checked
-- in model/fleet-limit.md).
--
-- `leasehold_limit` holds the limits in force: at most `fleet_limit`
-- tenures of runs of the job `job_name` (a job's name, or a kind's) at
-- once, across every replica. Set and cleared by operators
-- (`Controls::set_limit`, `leasehold limit set`); read by every claim.
--
-- `leasehold_run_slot` holds one row per place under a limit: slot
-- `slot_no` of `job_name` is taken by the tenure `(key, fence)` until
-- `expires_at`, the same instant as that tenure's lease row, written by
-- the same statements (claim, renewal, release, revoke), so a slot is
-- free exactly when its tenure is over by the server clock — or when its
-- `owner` (the liveness registration the run was stamped with) is dead,
-- as the lease row's early takeover reads it. A claim of a limited job
-- takes a free slot row with `FOR UPDATE SKIP LOCKED` and tests freeness
-- on the slot row's own columns: PostgreSQL re-checks them on the latest
-- version once locked, so two claims never take one slot, where a count of
-- live tenures in a claim's WHERE reads the statement's snapshot and lets
-- both through.
--
-- Jobs without a limit have no slot rows, and their statements find none.
--
-- Safe to apply while replicas of version 13 run: new tables they never
-- read. Their claims take no slot, so a limit holds only once every
-- replica runs version 14 (design.md, upgrades).
CREATE TABLE IF NOT EXISTS leasehold_limit (
    job_name    TEXT PRIMARY KEY,
    fleet_limit INTEGER NOT NULL CONSTRAINT leasehold_limit_range CHECK (fleet_limit BETWEEN 1 AND 10000),
    set_by      TEXT NOT NULL,
    set_at      TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE IF NOT EXISTS leasehold_run_slot (
    job_name    TEXT NOT NULL,
    slot_no     INTEGER NOT NULL CONSTRAINT leasehold_run_slot_no CHECK (slot_no >= 1),
    key         TEXT,
    fence       BIGINT,
    owner       BIGINT,
    acquired_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    expires_at  TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (job_name, slot_no)
);

-- The renewals and releases find a tenure's slot by its key and fence.
CREATE INDEX IF NOT EXISTS leasehold_run_slot_tenure ON leasehold_run_slot (key, fence);

INSERT INTO leasehold_schema_version (version, description)
VALUES (14, 'fleet-wide limits: at most N runs of a job at once, one slot row per place')
ON CONFLICT (version) DO NOTHING;
