-- leasehold schema, version 6: fences never repeat across a promotion
-- (invariant 4, docs/design.md §4 "Fences across a failover").
--
-- A standby promoted after asynchronous replication may lack the last
-- commits of the old primary, its fence sequence among them: without a step
-- here, `nextval` on the new primary would hand out fences the old one
-- already handed out. Every promotion starts a new WAL timeline, so the
-- first fence drawn on a timeline other than the recorded one first moves
-- the sequence ahead by a gap larger than any lag window, once per timeline.
--
-- Safe to apply while replicas of version 5 run: one table, four
-- functions, nothing they read. Version-5 replicas still call `nextval`
-- directly, so a promotion during a rolling upgrade is covered only for the
-- fences drawn by version-6 code.

-- The timeline on which fences were last drawn, one row. On a promoted
-- standby this row is as old as the rest of its data (it holds a previous
-- timeline, or is missing), which is exactly what makes the jump happen.
CREATE TABLE IF NOT EXISTS leasehold_timeline (
    one         BOOLEAN     PRIMARY KEY DEFAULT true CHECK (one),
    timeline    BIGINT      NOT NULL,
    -- The sequence's position before and after the last jump (NULL when the
    -- row was written without one: the migration), for `leasehold check`.
    jumped_from BIGINT,
    jumped_to   BIGINT,
    changed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- The server's WAL insert timeline: the first 8 hex digits of the current
-- WAL segment's name. Unlike pg_control_checkpoint() it is the timeline
-- being written now (a promoted server writes its new timeline before its
-- first checkpoint completes), and it needs no privilege. It errors on a
-- server in recovery, where nothing may draw a fence anyway.
CREATE OR REPLACE FUNCTION leasehold_timeline_id() RETURNS BIGINT
LANGUAGE sql VOLATILE AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

-- Records timeline `tl` and, if the recorded one differs (or the row is
-- missing), moves the sequence 2^32 ahead first. Concurrent callers are
-- serialized by the row lock: the first jumps, the others wait for its
-- commit and then find the row current. The jump is setval above nextval,
-- so the sequence only grows; a jump whose transaction rolls back stays
-- (sequences are not transactional) and the next caller jumps again, which
-- only wastes values. A differing timeline, not only a newer one, so that a
-- restore or pg_upgrade onto a fresh cluster (timeline 1 again) still
-- leaves the row current for the next promotion.
CREATE OR REPLACE FUNCTION leasehold_observe_timeline(tl BIGINT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    from_value BIGINT;
    to_value   BIGINT;
BEGIN
    PERFORM 1 FROM leasehold_timeline WHERE timeline = tl;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO leasehold_timeline AS t (one, timeline) VALUES (true, tl)
    ON CONFLICT (one) DO UPDATE SET timeline = tl, changed_at = clock_timestamp()
     /* guard:timeline.recorded_once */ WHERE t.timeline <> tl;
    IF NOT FOUND THEN
        RETURN; -- a concurrent caller recorded it (and jumped) first
    END IF;
    from_value := nextval('leasehold_fence_seq');
    to_value := from_value + 4294967296;
    /* guard:timeline.jump */ PERFORM setval('leasehold_fence_seq', to_value);
    UPDATE leasehold_timeline SET jumped_from = from_value, jumped_to = to_value;
    RAISE WARNING 'leasehold: fences drawn on a new timeline %: the fence sequence moved from % to %', tl, from_value, to_value
        USING DETAIL = 'a promoted standby may lack fences the old primary handed out; every fence from now on is above them';
END
$$;

-- A session's first fence: records the timeline it is drawn on (jumping
-- the sequence if that differs from the recorded one), notes it for the
-- session, then draws. If the transaction aborts, the note is undone with
-- it, so the session checks again.
CREATE OR REPLACE FUNCTION leasehold_first_fence_of_session() RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    tl BIGINT := leasehold_timeline_id();
BEGIN
    PERFORM leasehold_observe_timeline(tl);
    PERFORM set_config('leasehold.fence_timeline', tl::text, false);
    RETURN nextval('leasehold_fence_seq');
END
$$;

-- What every statement that hands out a fence calls instead of nextval.
-- A session checks the timeline once, at its first fence, and notes it in
-- a session setting: a session never changes timeline (a server in
-- recovery draws no fence, and a session opened on a standby before its
-- promotion has drawn none, so it checks at its first), so after that a
-- claim pays nextval and one setting read. A plain SQL expression, which
-- the planner inlines into the statement that calls it: the timeline read
-- and the row lookup run only in `leasehold_first_fence_of_session`.
CREATE OR REPLACE FUNCTION leasehold_next_fence() RETURNS BIGINT
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN /* guard:timeline.checked */ current_setting('leasehold.fence_timeline', true) <> ''
                THEN nextval('leasehold_fence_seq')
                ELSE leasehold_first_fence_of_session() END
$$;

-- The timeline this schema is applied on: no jump for it.
INSERT INTO leasehold_timeline (one, timeline) VALUES (true, leasehold_timeline_id())
ON CONFLICT (one) DO NOTHING;

INSERT INTO leasehold_schema_version (version, description)
VALUES (6, 'fences never repeat across a promotion: a jump on every new timeline')
ON CONFLICT (version) DO NOTHING;
