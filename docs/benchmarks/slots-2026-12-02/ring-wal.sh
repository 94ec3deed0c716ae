#!/bin/bash
# ring-wal.sh <old|new> <keys> <ring> <warm rounds> <rounds>   (FF=<fillfactor of leasehold_run>)
#
# WAL and backend CPU per run of the batch claim + batch release, one
# backend, no client: a throwaway PostgreSQL 15 with pg_walinspect and
# pg_stat_statements (track = all) at $PGHOST:$PGPORT; ring-wal.sql loaded;
# finish_old.sql / finish_new.sql hold the two FINISH_MANY texts (copied out
# of src/lease/batch/finish.rs). Each round claims 200 due keys (the
# claim_due UPDATE without its pause and candidate lists), commits, releases
# them with FINISH_MANY (next due in 1 ms, a history row each), commits.
MIGRATIONS=${MIGRATIONS:-migrations}
P="psql -q -h ${PGHOST:-/tmp/slots-pg} -p ${PGPORT:-54399} -U postgres -At"
$P -c "DROP TABLE IF EXISTS leasehold_run; DROP TABLE IF EXISTS leasehold_lease CASCADE;" 2>/dev/null
for f in $MIGRATIONS/*.sql; do $P -f $f >/dev/null 2>&1; done
$P -c "INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at, next_due_at) SELECT 'k'||g, 'h', 0, now()-interval '1 h', now()-interval '1 s', now()-interval '1 s' FROM generate_series(1,$2) g" -c "VACUUM ANALYZE leasehold_lease"
FIN=$(cat finish_$1.sql)
[ -n "$FF" ] && $P -c "ALTER TABLE leasehold_run SET (fillfactor=$FF)"
echo "CALL bench_rounds(:'fin', $4, 200, $3)" | $P -v fin="$FIN"
$P -c "VACUUM ANALYZE leasehold_run" -c "VACUUM leasehold_lease" -c "CHECKPOINT"
L0=$($P -c "select pg_current_wal_lsn()")
$P -c "select pg_stat_statements_reset()" >/dev/null
RUNS=$(( $5 * 200 ))
T0=$(date +%s.%N)
CPU=$(printf "select (split_part(pg_read_file('/proc/self/stat'),' ',14)::int + split_part(pg_read_file('/proc/self/stat'),' ',15)::int) as c0 \\gset\nCALL bench_rounds(:'fin', $5, 200, $3);\nselect (split_part(pg_read_file('/proc/self/stat'),' ',14)::int + split_part(pg_read_file('/proc/self/stat'),' ',15)::int) - :c0;\n" | $P -v fin="$FIN")
T1=$(date +%s.%N)
echo "backend cpu ms per 1000 runs: $(( CPU * 10 * 1000 / RUNS ))" | tr '\n' ' '; echo
L1=$($P -c "select pg_current_wal_lsn()")
echo "== $1 keys=$2 ring=$3 warm=$4 rounds=$5 runs=$RUNS secs=$(echo "$T1-$T0"|bc)"
$P -F' ' -c "select \"resource_manager/record_type\", round(count::numeric/$RUNS,3) per_run, round(fpi_size::numeric/$RUNS) fpi_bytes, round(combined_size::numeric/$RUNS) bytes from pg_get_wal_stats('$L0','$L1', true) where count>0 order by count desc limit 12"
$P -F' ' -c "select round(sum(count)::numeric/$RUNS,2) rec, round(sum(combined_size)::numeric/$RUNS) bytes from pg_get_wal_stats('$L0','$L1', false)"
$P -F' | ' -c "select calls, round(total_exec_time::numeric*1000/$RUNS,1) us_per_run, left(regexp_replace(query,'\s+',' ','g'),50) from pg_stat_statements where query like '%unnest%' or query like '%WITH pick AS%' order by total_exec_time desc limit 3"
