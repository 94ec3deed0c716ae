\set b (:client_id + 8 * random(0, 19))
SELECT lh_claim(:b);
SELECT fences::text AS fences, runs::text AS runs FROM lh_read(:b) \gset
SELECT lh_finish(:b, CAST(:fences AS int8[]), CAST(:runs AS int8[]));
