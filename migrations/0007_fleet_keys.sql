-- leasehold schema, version 7: keys that belong to the fleet
-- (docs/design.md §10). A key of a *kind* is stored here once, with its
-- arguments and schedule, and every replica that registers the kind runs it.
--
-- Safe to apply while replicas of version 6 run: two new tables, nothing
-- they read or write. Their leases stay in `leasehold_lease` like every
-- other key's: a kind's key gets its lease row from the first replica that
-- registers its kind.

-- One row per kind any key or replica named. `generation` moves on every
-- add, update and removal of a key of the kind, so a replica reads one
-- small row per kind per poll and reloads a kind's keys only when it moved.
-- `keys` counts the kind's keys (kept by the same statements), so the
-- "keys of an unknown kind" figure never scans the keys. `seen_until` is
-- how long the latest replica that registered the kind vouches for it
-- (three of its poll intervals ahead): NULL or past means no live replica
-- runs the kind.
CREATE TABLE IF NOT EXISTS leasehold_kind (
    kind        TEXT        PRIMARY KEY,
    generation  BIGINT      NOT NULL DEFAULT 0,
    keys        BIGINT      NOT NULL DEFAULT 0 CHECK (keys >= 0),
    seen_until  TIMESTAMPTZ
);

-- The keys of kinds. `args` is the kind's `Args` as JSON; `schedule` and
-- `catch_up` are the text forms of `Schedule` and `CatchUp`. `version`
-- starts at 1 and moves on every update, so a run can tell which arguments
-- it runs with. `args_error` is what a replica that registers the kind
-- found wrong with this version (arguments that no longer deserialize, a
-- schedule it cannot read); an update clears it.
CREATE TABLE IF NOT EXISTS leasehold_key (
    key         TEXT        PRIMARY KEY,
    kind        TEXT        NOT NULL,
    args        JSONB       NOT NULL,
    schedule    TEXT        NOT NULL,
    catch_up    TEXT        NOT NULL DEFAULT 'once',
    version     BIGINT      NOT NULL DEFAULT 1 CHECK (version >= 1),
    args_error  TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- A replica reloads the keys of one kind at a time.
CREATE INDEX IF NOT EXISTS leasehold_key_kind ON leasehold_key (kind);

INSERT INTO leasehold_schema_version (version, description)
VALUES (7, 'keys of job kinds, stored once and run by every replica that registers the kind')
ON CONFLICT (version) DO NOTHING;
