-- leasehold schema, version 10: a key of a kind removed and added again
-- starts a new life (docs/design.md §10).
--
-- One row per key name that was ever removed (`LeaseStore::remove_key`
-- writes it in the statement that deletes the key): how many lives ended
-- (`lives`), the last version of arguments the key had (`last_version`),
-- and when its latest life ended (`removed_at`). `add_keys` reads it so a
-- key added again starts at `last_version + 1` — a key name's version
-- never goes backwards, so a downstream that deduplicates on
-- (key, args_version) is never fooled —, and status reads it to show a
-- lease row whose key was removed as `removed`, not as a live free key.
-- `leasehold forget` leaves it: it is what keeps the version promise.
--
-- Safe to apply while replicas of version 9 run: a new table they neither
-- read nor write, and rows inserted into it. A version-9 replica's release
-- does not know lives (it may file a run of the old life's next slot over
-- the new life's first, as before this version); every replica of
-- version 10 does.
CREATE TABLE IF NOT EXISTS leasehold_key_life (
    key          TEXT        PRIMARY KEY,
    lives        INTEGER     NOT NULL DEFAULT 1 CHECK (lives >= 1),
    last_version BIGINT      NOT NULL DEFAULT 0 CHECK (last_version >= 0),
    removed_at   TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- Keys removed before this version: a lease row of a kind's key (its job
-- is a kind) with no stored key left. Their last version is unknown (0).
INSERT INTO leasehold_key_life (key, lives, last_version, removed_at)
SELECT l.key, 1, 0, clock_timestamp()
  FROM leasehold_lease AS l
 WHERE EXISTS (SELECT 1 FROM leasehold_kind AS c WHERE c.kind = l.job_name)
   AND NOT EXISTS (SELECT 1 FROM leasehold_key AS k WHERE k.key = l.key)
ON CONFLICT (key) DO NOTHING;

INSERT INTO leasehold_schema_version (version, description)
VALUES (10, 'a removed key''s life is remembered: a key added again starts a new life, its version goes on')
ON CONFLICT (version) DO NOTHING;
