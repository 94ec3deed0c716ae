-- leasehold schema, version 15: a fenced transaction ends with its tenure
-- when its run's liveness registration dies too (F5 with invariant 10).
--
-- Invariant 10 ends a stamped run's tenure early when the liveness
-- registration it was stamped with is dead (seen gone a grace ago): the
-- key may then be claimed again, and under a fleet-wide limit
-- (invariant 11) the run's place is free at once for another key. The
-- commit check of version 5 read only the lease row's fence and expiry,
-- so a holder frozen while its session was killed, resuming after its
-- place went to another key's run, still committed its fenced work: one
-- run more than the limit writing at once. The check now reads the run's
-- registration as the claims and the places do.
--
-- Safe to apply while replicas of version 14 run: it replaces one
-- function, and is only ever stricter (a run whose registration is dead
-- is one the runtime has already stopped, or one whose process was frozen
-- or cut off past the grace).

-- F5, the commit check (see version 5). Runs at COMMIT of every
-- transaction that advanced a fence row (deferred), on the server clock:
-- the tenure whose fence the row now carries must still hold its lease —
-- the key's row still carries that fence (no newer tenure, no revoke), it
-- has not expired, and the liveness registration its run was stamped with
-- is not dead (the rule of `dead_owner!` in src/lease/liveness.rs, which
-- the claims, the places and the re-point read). Otherwise the COMMIT
-- fails with SQLSTATE LH001 and nothing the transaction wrote is
-- committed.
CREATE OR REPLACE FUNCTION leasehold_fence_tenure_live() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.lease_key IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1
       FROM leasehold_lease AS l
      WHERE l.key = NEW.lease_key
        -- the same tenure: a newer claim or a revoke changed the fence
        AND /* guard:commit_check.fence */ l.fence = NEW.last_fence
        -- still live on the server clock, read at COMMIT
        AND /* guard:commit_check.live */ l.expires_at > clock_timestamp()
        -- not ended early: its run's registration is not dead
        AND NOT (/* guard:commit_check.owner_alive */ l.owner IS NOT NULL AND EXISTS (
                SELECT 1 FROM leasehold_replica AS r
                 WHERE r.id = l.owner AND l.acquired_at < r.confirmed_at + r.grace
                   AND r.gone_seen_at + r.grace <= clock_timestamp()));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leasehold: the tenure of key % with fence % ended before this fenced transaction committed; nothing it wrote was committed', NEW.lease_key, NEW.last_fence
            USING ERRCODE = 'LH001',
                  HINT = 'the run lost its lease (expired while the process was paused or slow, taken over, force-released, or its replica''s liveness session ended for longer than the grace); another run may own the work now';
    END IF;
    RETURN NULL;
END
$$;

INSERT INTO leasehold_schema_version (version, description)
VALUES (15, 'a fenced transaction ends with its tenure when its run''s liveness registration dies')
ON CONFLICT (version) DO NOTHING;
