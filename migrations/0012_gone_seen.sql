-- leasehold schema, version 12: a liveness registration's grace counts
-- from when a replica first saw its session gone (docs/design.md,
-- invariant 10).
--
-- Every runtime's confirmation tests the advisory lock of each other
-- registration not yet seen gone, and stamps `gone_seen_at` when it is
-- free. A registration is dead once `gone_seen_at + grace` has passed (a
-- session that ended never comes back, so the lock is not tested again). Before, the grace counted from its last
-- confirmation: a replica silent for about a grace (a stall, a brief cut)
-- whose session then ended was taken over at once, before it could read
-- the error and move its runs to a new registration. Now it has a grace
-- after its session ended, whatever came before.
--
-- Safe to apply while replicas of version 11 run: a nullable column they
-- neither read nor write. Until they are upgraded they take over by the
-- old rule.
ALTER TABLE leasehold_replica ADD COLUMN IF NOT EXISTS gone_seen_at TIMESTAMPTZ;

INSERT INTO leasehold_schema_version (version, description)
VALUES (12, 'a liveness registration''s grace counts from when its session was first seen gone')
ON CONFLICT (version) DO NOTHING;
