-- leasehold schema, version 5: a fenced transaction ends with its tenure
-- (invariant F5, docs/design.md §4).
--
-- Safe to apply while replicas of version 4 run: one nullable column (no
-- rewrite), one function, one deferred trigger. A version-4 replica's fenced
-- transaction on a resource that a version-5 run wrote last is checked too
-- (the row names the key; a resource belongs to one key), which is only
-- ever stricter.

-- The lease key of the tenure that advanced this row last (the fence alone
-- identifies the tenure, since fences are unique across keys; the key makes
-- the check one primary-key lookup). NULL when no tenure wrote it: a row an
-- operator's revoke raised, or one written before version 5.
ALTER TABLE leasehold_fence ADD COLUMN IF NOT EXISTS lease_key TEXT;

-- F5, the commit check (replaced in version 15, which adds the run's
-- liveness registration: its guard clauses are marked there). Runs at COMMIT of every transaction that advanced
-- a fence row (deferred), on the server clock: the tenure whose fence the
-- row now carries must still hold its lease — the key's row still carries
-- that fence (no newer tenure, no revoke) and has not expired. Otherwise the
-- COMMIT fails with SQLSTATE LH001 and nothing the transaction wrote is
-- committed, however late the client sent it (a process frozen inside its
-- transaction, a commit that raced its deadline).
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
        AND l.fence = NEW.last_fence
        -- still live on the server clock, read at COMMIT
        AND l.expires_at > clock_timestamp();
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leasehold: the tenure of key % with fence % ended before this fenced transaction committed; nothing it wrote was committed', NEW.lease_key, NEW.last_fence
            USING ERRCODE = 'LH001',
                  HINT = 'the run lost its lease (expired while the process was paused or slow, taken over, or force-released); another run of the key owns the work now';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS leasehold_fence_tenure_live ON leasehold_fence;
CREATE CONSTRAINT TRIGGER leasehold_fence_tenure_live
    AFTER INSERT OR UPDATE ON leasehold_fence
    /* guard:commit_check.deferred */ DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION leasehold_fence_tenure_live();

INSERT INTO leasehold_schema_version (version, description)
VALUES (5, 'a fenced transaction ends with its tenure: commit check, lease key on fence rows')
ON CONFLICT (version) DO NOTHING;
