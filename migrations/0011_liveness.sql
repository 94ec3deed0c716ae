-- leasehold schema, version 11: a crashed replica's keys are taken over in
-- about a second instead of a whole lease (docs/design.md, invariant 10).
--
-- Each runtime *registers* its liveness session (the listener's own
-- connection, never through a pooler): a row here, and the session-level
-- advisory lock (LIVENESS_LOCK, pid) that PostgreSQL drops the moment the
-- session ends. The runtime confirms its row every 250 ms. A claim records
-- in `leasehold_lease.owner` the registration its run was claimed under,
-- and another replica may take a run over before its lease expires only
-- when that registration is *dead*: not confirmed for its grace, registered
-- after the server's last start, and its lock free (its session is gone).
--
-- UNLOGGED: confirmations write no WAL. A crash of the server empties the
-- table, and a standby never has its rows: a missing registration is never
-- dead, so after a crash or a failover every run falls back to its lease.
-- A clean restart keeps the rows, which is why a registration from before
-- the server's start never counts (`pg_postmaster_start_time()`).
--
-- Ids come from a logged sequence, so a crash never hands out an id that
-- a lease row still names.
--
-- Safe to apply while replicas of version 10 run: a new table and a
-- nullable column they neither read nor write. Their claims leave `owner`
-- as it was, so a row one of them claims may carry the stamp of a dead
-- registration; the takeover rule therefore only trusts a stamp written
-- while its registration was confirmed (`acquired_at` before its
-- `confirmed_at + grace`), which an older replica's later claim is not.
CREATE SEQUENCE IF NOT EXISTS leasehold_replica_id;

CREATE UNLOGGED TABLE IF NOT EXISTS leasehold_replica (
    id            BIGINT      PRIMARY KEY DEFAULT nextval('leasehold_replica_id'),
    pid           INTEGER     NOT NULL,
    holder        TEXT        NOT NULL,
    registered_at TIMESTAMPTZ NOT NULL,
    confirmed_at  TIMESTAMPTZ NOT NULL,
    grace         INTERVAL    NOT NULL,
    reported_at   TIMESTAMPTZ
);

ALTER TABLE leasehold_lease ADD COLUMN IF NOT EXISTS owner BIGINT;

INSERT INTO leasehold_schema_version (version, description)
VALUES (11, 'a run''s replica registers its liveness session; a dead session''s runs are taken over early')
ON CONFLICT (version) DO NOTHING;
