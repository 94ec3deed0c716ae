\set b (:client_id + 8 * random(0, 19))
SELECT fl_claim(:b);
SELECT fences::text AS fences, runs::text AS runs FROM lh_read(:b) \gset
SELECT fl_finish(:b, CAST(:fences AS int8[]), CAST(:runs AS int8[]));
