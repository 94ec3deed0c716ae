//! Renewal cost (section 2 of the output): one heartbeat tick for N held
//! leases (`renew_many`) against N single `renew` calls, and the statement
//! alone.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use leasehold::store::{LeaseStore, Renewal};
use sqlx::PgPool;

use crate::report::{ms, p50_p99, progress, ratio, table, us};
use crate::setup::{Bench, drop_db, fresh_db};
use crate::stats::{RENEW_SQL, reset_statement_stats, statement_totals};

/// The text of `LeaseStore::renew_many`'s statement, to time it alone and
/// to EXPLAIN it: the library's own constant, so the two never drift.
const RENEW_MANY_SQL: &str = LeaseStore::RENEW_MANY_SQL;

pub(crate) async fn renewal(b: &Bench) {
    progress("2. renewal cost");
    let (db, stats) = fresh_db(&b.server).await;
    let pool = db.pool_with(2).await;
    let store = LeaseStore::new(pool.clone());
    let ttl = Duration::from_secs(600);
    let sizes: &[usize] = if b.smoke { &[1, 100] } else { &[1, 100, 1_000, 10_000] };
    let mut rows = Vec::new();
    let mut explain = Vec::new();
    let mut target = None;
    for &n in sizes {
        progress(&format!("   N = {n}"));
        let holder = format!("renewer-{n}");
        // N leases of one holder, taken by N claims (two in flight, one per
        // pooled connection).
        let tenures: Vec<(String, i64)> = stream::iter(1..=n)
            .map(|i| {
                let (store, holder) = (&store, &holder);
                async move {
                    let key = format!("renew-{holder}-{i}");
                    let claim = store.claim(&key, holder, ttl).await.expect("claim");
                    let lease = claim.acquired().expect("a new key is free");
                    (lease.key, lease.fence)
                }
            })
            .buffer_unordered(2)
            .collect()
            .await;
        let leases = store
            .renew_many(&holder, &tenures, ttl)
            .await
            .expect("renew_many")
            .renewed;
        assert_eq!(leases.len(), n);
        // The scenario's own database: only the lease table has rows.
        sqlx::raw_sql("VACUUM ANALYZE").execute(&pool).await.expect("vacuum");
        let keys: Vec<&str> = tenures.iter().map(|(k, _)| k.as_str()).collect();
        let fences: Vec<i64> = tenures.iter().map(|(_, f)| *f).collect();
        let ttls: Vec<f64> = vec![ttl.as_secs_f64(); n];

        let rounds = match (b.smoke, n) {
            (true, 1) => 30,
            (true, _) => 5,
            (false, 1) => 200,
            (false, 100) => 40,
            (false, 1_000) => 10,
            (false, _) => 5,
        };
        let (mut many, mut single, mut alone) = (Vec::new(), Vec::new(), Vec::new());
        // Statements per tick, counted by the server during the first round (outside the timings).
        let (mut st_many, mut st_single) = (None, None);
        for round in 0..rounds {
            for step in 0..3 {
                let variant = (step + round) % 3;
                let count = stats && round == 0 && variant < 2;
                if count {
                    reset_statement_stats(&pool).await;
                }
                match variant {
                    0 => {
                        let t = Instant::now();
                        let out = store.renew_many(&holder, &tenures, ttl).await.expect("renew_many");
                        many.push(t.elapsed());
                        assert!(out.lost.is_empty() && out.renewed.len() == n);
                    }
                    1 => {
                        let t = Instant::now();
                        for lease in &leases {
                            let r = store.renew(lease, ttl).await.expect("renew");
                            assert!(matches!(r, Renewal::Renewed(_)));
                        }
                        single.push(t.elapsed());
                    }
                    _ => {
                        let t = Instant::now();
                        let out: Vec<sqlx::postgres::PgRow> = sqlx::query(RENEW_MANY_SQL)
                            .bind(&holder)
                            .bind(&keys)
                            .bind(&fences)
                            .bind(&ttls)
                            .fetch_all(&pool)
                            .await
                            .expect("renew statement");
                        alone.push(t.elapsed());
                        assert_eq!(out.len(), n);
                    }
                }
                if count {
                    let calls = Some(statement_totals(&pool, RENEW_SQL).await.calls);
                    if variant == 0 {
                        st_many = calls;
                    } else {
                        st_single = calls;
                    }
                }
            }
        }
        let show = |s: Option<i64>| s.map_or("n/a".to_owned(), |c| c.to_string());
        let (m50, m99) = p50_p99(&many);
        let (s50, s99) = p50_p99(&single);
        let (a50, a99) = p50_p99(&alone);
        let r = ratio(s50, m50);
        rows.push(vec![
            n.to_string(),
            "`renew_many` (one statement)".into(),
            show(st_many),
            ms(m50),
            ms(m99),
            us(m50 / n as u32),
            format!("{r:.1}×"),
        ]);
        rows.push(vec![
            n.to_string(),
            format!("{n} × `renew` (one statement per lease)"),
            show(st_single),
            ms(s50),
            ms(s99),
            us(s50 / n as u32),
            "1×".into(),
        ]);
        rows.push(vec![
            n.to_string(),
            "renew_many's SQL alone (no lost-lease bookkeeping)".into(),
            "1".into(),
            ms(a50),
            ms(a99),
            us(a50 / n as u32),
            format!("{:.1}×", ratio(s50, a50)),
        ]);
        if n == *sizes.last().unwrap_or(&0) {
            target = Some((n, r, st_many, m50, a50));
            explain = explain_renew(&pool, &holder, &keys, &fences, &ttls).await;
        }
    }
    println!("## 2. Renewal cost: one heartbeat tick for N held leases\n");
    println!(
        "Each round runs one tick of each variant, the order rotating; `renew` calls run one after another on \
         the same pool. Statements per tick are counted by `pg_stat_statements`. \"vs N × renew\" is the \
         per-lease cost of N single `renew` calls divided by this row's.\n"
    );
    table(
        &[
            "N",
            "heartbeat tick",
            "statements / tick",
            "tick p50",
            "tick p99",
            "per lease (p50)",
            "vs N × renew",
        ],
        &rows,
    );
    if let Some((n, r, st, m50, a50)) = target {
        let one = st.is_none_or(|s| s == 1);
        let verdict = |ok: bool| match (n, ok) {
            (10_000, true) => "met",
            (10_000, false) => "missed",
            _ => "not judged (the target is for N = 10,000, full run)",
        };
        println!(
            "Targets at N = {n}: 1 statement per tick: **{}** ({}); ≥ 100× cheaper per lease: **{}** ({r:.1}×; \
             the statement alone is {:.1}% of the `renew_many` call).\n",
            verdict(one),
            st.map_or("not counted".into(), |s| format!("{s} statement")),
            verdict(r >= 100.0),
            100.0 * a50.as_secs_f64() / m50.as_secs_f64(),
        );
        println!(
            "`EXPLAIN (ANALYZE, BUFFERS)` of the `renew_many` statement for N = {n} (inside a transaction rolled back):\n"
        );
        println!("```text");
        for line in &explain {
            println!("{line}");
        }
        println!("```\n");
    }
    pool.close().await;
    drop_db(db).await;
}

async fn explain_renew(pool: &PgPool, holder: &str, keys: &[&str], fences: &[i64], ttls: &[f64]) -> Vec<String> {
    let mut tx = pool.begin().await.expect("begin");
    let sql = format!("EXPLAIN (ANALYZE, BUFFERS) {RENEW_MANY_SQL}");
    let lines: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(holder)
        .bind(keys)
        .bind(fences)
        .bind(ttls)
        .fetch_all(&mut *tx)
        .await
        .unwrap_or_else(|e| vec![format!("EXPLAIN failed: {e}")]);
    let _ = tx.rollback().await;
    lines
}
