CREATE OR REPLACE PROCEDURE bench_rounds(fin text, rounds int, batch int, ring int)
LANGUAGE plpgsql AS $$
DECLARE
  ks text[]; fs int8[]; rn int8[]; n int;
BEGIN
  FOR i IN 1..rounds LOOP
    WITH pick AS (
      SELECT key FROM leasehold_lease WHERE expires_at <= clock_timestamp() AND (next_due_at IS NULL OR next_due_at <= clock_timestamp())
      ORDER BY next_due_at NULLS FIRST, key LIMIT batch FOR UPDATE SKIP LOCKED
    ), c AS (
      UPDATE leasehold_lease l SET holder='h', fence=nextval('leasehold_fence_seq'), acquired_at=clock_timestamp(),
        expires_at=clock_timestamp()+interval '10 s', job_name='j', runs=l.runs+1, slot_at=COALESCE(l.slot_at,l.next_due_at)
      FROM pick WHERE l.key=pick.key RETURNING l.key, l.fence, l.runs)
    SELECT array_agg(key), array_agg(fence), array_agg(runs) INTO ks, fs, rn FROM c;
    COMMIT;
    n := coalesce(array_length(ks,1),0);
    IF n > 0 THEN
      EXECUTE fin USING ks, array_fill('h'::text, ARRAY[n]), fs,
        array_fill(clock_timestamp() + interval '1 ms', ARRAY[n])::timestamptz[], array_fill(NULL::float8, ARRAY[n]), 'chan',
        array_fill('j'::text, ARRAY[n]), rn, array_fill(NULL::timestamptz, ARRAY[n]), array_fill(clock_timestamp(), ARRAY[n]),
        array_fill('succeeded'::text, ARRAY[n]), array_fill(NULL::text, ARRAY[n]), array_fill(NULL::text, ARRAY[n]), array_fill(ring, ARRAY[n]);
    END IF;
    COMMIT;
  END LOOP;
END $$;
