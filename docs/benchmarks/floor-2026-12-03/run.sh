#!/usr/bin/env bash
# The floor of a run on one machine: how many short runs per second
# PostgreSQL alone can do when each run writes the least a lease, a fence
# and a history row need, next to leasehold's own claim and release
# statements, with no client work at all (pgbench only).
#
# Usage: PGURL=postgres://postgres@127.0.0.1:54330 bash run.sh
# PGURL names a durable server (fsync on) with pg_stat_statements loaded;
# the script creates and reuses a database `floor` in it.
set -euo pipefail
cd "$(dirname "$0")"
root=../../..
psql -q "$PGURL/postgres" -c "DROP DATABASE IF EXISTS floor" -c "CREATE DATABASE floor"
for f in "$root"/migrations/*.sql; do psql -q "$PGURL/floor" -v ON_ERROR_STOP=1 -f "$f" >/dev/null; done
# 16,000 keys, each with a full history ring of 10 places (the steady
# state: a run's history row is an UPDATE in place).
psql -q "$PGURL/floor" -v ON_ERROR_STOP=1 \
  -c "INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at)
      SELECT 'k' || g, 'h', 0, now() - interval '1 h', now() - interval '1 h' + interval '1 s', now()
        FROM generate_series(0, 15999) g" \
  -c "INSERT INTO leasehold_run
      SELECT 'k' || g, s, 0, 'j', 0, 'h', now(), now(), now(), 'succeeded'
        FROM generate_series(0, 15999) g, generate_series(0, 9) s"
psql -q "$PGURL/floor" -v ON_ERROR_STOP=1 -f fns.sql
# Each round starts from the same rows: run numbers from 0 again, in the
# leases and in the ring, so leasehold's ring-order check (a place is only
# overwritten by a newer run) lets every run's history row through, as in
# a fleet; with the ring left at an earlier round's numbers, its writes
# would all take the conflict path instead.
reset() {
  psql -q "$PGURL/floor" \
    -c "UPDATE leasehold_lease SET holder = 'h', runs = 0, acquired_at = now() - interval '1 h',
               expires_at = now() - interval '1 h' + interval '1 s', next_due_at = now() - interval '1 h'" \
    -c "UPDATE leasehold_run SET run_no = 0" \
    -c "VACUUM ANALYZE leasehold_lease" -c "VACUUM ANALYZE leasehold_run"
}
# Each transaction of the scripts is 100 runs: a claim of 100 keys, a read
# of their fences, a release of the 100 with their history rows. Every
# claim takes all 100 (sum of `runs` = transactions x 100 afterwards).
for round in 1 2; do
  for s in fl lh; do
    reset
    echo -n "$s: load $(cut -d' ' -f1 /proc/loadavg) "
    pgbench -n -M prepared -c 8 -j 2 -T 15 -f "pb_$s.sql" "$PGURL/floor" 2>&1 | grep -E '^tps'
  done
done
