-- leasehold schema, version 8: room on the history ring's pages for every
-- run's row to be rewritten in place (a HOT update).
--
-- Safe to apply while replicas of version 7 run: a storage parameter, no
-- rewrite, nothing they read or write changes. It applies to pages filled
-- from now on; pages written before keep their rows packed to 80 % until
-- they are rewritten (VACUUM FULL or pg_repack, if wanted; not needed).
--
-- A run's release overwrites its key's ring place (run number mod ring
-- length) with an UPDATE of columns no index covers, so it can stay on its
-- page as a HOT update — no index entry, no lock record for a move to
-- another page — when the page has room for the new version. The keys a
-- runtime claims together run in step, so their rows for one ring place sit
-- on the same pages and are rewritten within the same few statements: at
-- 80 %, a page had room for about a quarter of its rows' new versions and
-- the others went to other pages (measured: 64 % of the history writes
-- were not HOT, 1.6 more WAL records per run). At 50 %, a page has room
-- for a new version of every row it holds; the versions of the previous
-- round of the ring are long dead and pruned when the page fills. The cost
-- is space: the ring's table is about 1.6 times as large.
ALTER TABLE leasehold_run SET (fillfactor = 50);

INSERT INTO leasehold_schema_version (version, description)
VALUES (8, 'room on the history ring''s pages for each run''s row to be rewritten in place')
ON CONFLICT (version) DO NOTHING;
