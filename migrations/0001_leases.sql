-- leasehold schema, version 1.
--
-- Plain SQL: leasehold::migrate() applies it, and users who run their own
-- migration tool can apply this file themselves (then build the runtime with
-- automatic migration off). Every object is prefixed `leasehold_` so a user's
-- own `lease` or `fence` table is never touched. The file records its own
-- version, so a schema applied by hand is recognised by leasehold.

CREATE TABLE IF NOT EXISTS leasehold_schema_version (
    version     INTEGER     PRIMARY KEY,
    description TEXT        NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- Fencing tokens for every lease are drawn from this one sequence. A sequence
-- never hands out a value twice and never goes back (it is not rolled back
-- with a transaction and survives a crash ahead of its last value), so a
-- key's fence keeps growing across release, expiry, takeover, a restart of the
-- same holder, and an operator deleting the lease row (invariant 4). Fences of
-- one key are therefore increasing but not consecutive.
CREATE SEQUENCE IF NOT EXISTS leasehold_fence_seq AS BIGINT START WITH 1;

CREATE TABLE IF NOT EXISTS leasehold_lease (
    key         TEXT        PRIMARY KEY,
    -- hostname-<random suffix> of the replica that holds, or last held, the
    -- lease. A released or expired lease keeps its last holder for
    -- diagnostics: only expires_at decides whether the lease is held.
    holder      TEXT        NOT NULL,
    fence       BIGINT      NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    -- Schedule state shared by the whole fleet: a scheduled run may start
    -- only once the server clock has passed it. NULL means "due now".
    next_due_at TIMESTAMPTZ,

    CONSTRAINT leasehold_lease_key_valid
        CHECK (key <> '' AND octet_length(key) <= 255),
    CONSTRAINT leasehold_lease_holder_valid
        CHECK (holder <> '' AND octet_length(holder) <= 255),
    -- A lease expired at birth (a sign error in a duration) is a constraint
    -- violation, never a phantom lock.
    CONSTRAINT leasehold_lease_validity
        CHECK (expires_at > acquired_at)
)
-- Renewals rewrite every held row once per heartbeat. No index covers
-- expires_at, so with free space left on each page they are HOT updates
-- (no index maintenance, fewer pages dirtied).
WITH (fillfactor = 70);

-- Fences remembered by downstream resources for fenced transactions
-- (FenceGuard::begin_fenced). One row per resource; a resource belongs to one
-- lease key because fences are ordered within a key only.
CREATE TABLE IF NOT EXISTS leasehold_fence (
    resource   TEXT        PRIMARY KEY CHECK (resource <> '' AND octet_length(resource) <= 255),
    last_fence BIGINT      NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

INSERT INTO leasehold_schema_version (version, description)
VALUES (1, 'leases, fence sequence, schedule state, fenced resources')
ON CONFLICT (version) DO NOTHING;
