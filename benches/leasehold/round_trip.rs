//! Round trip (section 1 of the output): claim + release against the physical
//! floor (two committed single-row `UPDATE`s), interleaved, plus each
//! operation's server-side cost.

use std::time::{Duration, Instant};

use leasehold::{Claim, Due, LeaseStore};
use sqlx::PgPool;

use crate::report::{ms, p50_p99, progress, ratio, table};
use crate::setup::{Bench, drop_db, fresh_db};
use crate::stats::{ANY_SQL, reset_statement_stats, statement_totals};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Floor,
    ClaimRelease,
    ClaimRunRelease,
    ClaimRunReleaseRecorded,
    Select1,
    LosingClaim,
}

impl Op {
    const ALL: [Op; 6] = [
        Op::Floor,
        Op::ClaimRelease,
        Op::ClaimRunRelease,
        Op::ClaimRunReleaseRecorded,
        Op::Select1,
        Op::LosingClaim,
    ];

    fn label(self) -> &'static str {
        match self {
            Op::Floor => "floor: 2 × committed single-row `UPDATE`",
            Op::ClaimRelease => "leasehold `claim` + `release`",
            Op::ClaimRunRelease => "leasehold `claim_run(Due::Now)` + `release` (no history)",
            Op::ClaimRunReleaseRecorded => {
                "`claim_run(Due::Now)` + the release that writes the run's history row (the runtime's path)"
            }
            Op::Select1 => "`SELECT 1` (reference)",
            Op::LosingClaim => "`claim` that loses (`HeldElsewhere`)",
        }
    }

    fn statements(self) -> u32 {
        match self {
            Op::Floor | Op::ClaimRelease | Op::ClaimRunRelease | Op::ClaimRunReleaseRecorded => 2,
            Op::Select1 | Op::LosingClaim => 1,
        }
    }
}

const RT_TTL: Duration = Duration::from_secs(60);

/// Run numbers for the recorded releases: the ring (100 rows) fills, then
/// each run overwrites the one 100 runs older, as in steady state.
static RUN_NO: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

async fn run_op(op: Op, store: &LeaseStore, pool: &PgPool) {
    match op {
        Op::Floor => {
            for _ in 0..2 {
                sqlx::query("UPDATE bench_floor SET n = n + 1 WHERE id = 1")
                    .execute(pool)
                    .await
                    .expect("floor update");
            }
        }
        Op::ClaimRelease => {
            let lease = store
                .claim("rt", "bench", RT_TTL)
                .await
                .expect("claim")
                .acquired()
                .expect("the key is free");
            assert!(
                store
                    .release(&lease.key, &lease.holder, lease.fence)
                    .await
                    .expect("release")
            );
        }
        Op::ClaimRunRelease => {
            let lease = store
                .claim_run("rt-run", "bench", RT_TTL, Due::Now)
                .await
                .expect("claim_run")
                .acquired()
                .expect("the key is free");
            assert!(
                store
                    .release(&lease.key, &lease.holder, lease.fence)
                    .await
                    .expect("release")
            );
        }
        Op::ClaimRunReleaseRecorded => {
            let lease = store
                .claim_run("rt-history", "bench", RT_TTL, Due::Now)
                .await
                .expect("claim_run")
                .acquired()
                .expect("the key is free");
            let run_no = RUN_NO.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            assert!(
                store
                    .release_recorded(&lease, run_no, leasehold::DEFAULT_HISTORY)
                    .await
                    .expect("release")
            );
        }
        Op::Select1 => {
            sqlx::query_scalar::<_, i32>("SELECT 1")
                .fetch_one(pool)
                .await
                .expect("select 1");
        }
        Op::LosingClaim => {
            let claim = store.claim("rt-held", "bench", RT_TTL).await.expect("claim");
            assert!(matches!(claim, Claim::HeldElsewhere { .. }), "{claim:?}");
        }
    }
}

pub(crate) async fn round_trip(b: &Bench) {
    progress("1. round trip");
    let (db, stats) = fresh_db(&b.server).await;
    let pool = db.pool_with(2).await;
    let store = LeaseStore::new(pool.clone());
    sqlx::query("CREATE TABLE bench_floor (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
        .execute(&pool)
        .await
        .expect("create floor table");
    sqlx::query("INSERT INTO bench_floor (id) VALUES (1)")
        .execute(&pool)
        .await
        .expect("floor row");
    store
        .claim("rt-held", "someone-else", Duration::from_secs(3600))
        .await
        .expect("claim")
        .acquired()
        .expect("held key");

    let (rounds, iters) = if b.smoke { (3, 40) } else { (20, 200) };
    for op in Op::ALL {
        for _ in 0..50 {
            run_op(op, &store, &pool).await;
        }
    }
    // samples[round][op]
    let mut samples = vec![vec![Vec::with_capacity(iters); Op::ALL.len()]; rounds];
    for round in samples.iter_mut() {
        for i in 0..iters {
            for j in 0..Op::ALL.len() {
                let k = (i + j) % Op::ALL.len();
                let t = Instant::now();
                run_op(Op::ALL[k], &store, &pool).await;
                round[k].push(t.elapsed());
            }
        }
    }

    // Server-side cost of each operation, in isolation.
    let mut server = Vec::new();
    if stats {
        let n = if b.smoke { 40 } else { 200 };
        for op in Op::ALL {
            reset_statement_stats(&pool).await;
            for _ in 0..n {
                run_op(op, &store, &pool).await;
            }
            server.push(statement_totals(&pool, ANY_SQL).await);
        }
    }

    let all = |k: usize| {
        samples
            .iter()
            .flat_map(|round| round[k].iter().copied())
            .collect::<Vec<_>>()
    };
    let (floor50, floor99) = p50_p99(&all(0));
    println!("## 1. Round trip: claim + release vs the physical floor\n");
    println!(
        "{rounds} rounds × {iters} iterations; each iteration runs every operation once, the order rotating \
         (A B C D E F, B C D E F A, …). One pool of 2 connections, one caller at a time. \
         Floor: two committed single-row `UPDATE bench_floor SET n = n + 1 WHERE id = 1` (one round trip \
         and one durable commit each), the least any claim + release pair can cost.\n"
    );
    let mut rows = Vec::new();
    for (k, op) in Op::ALL.iter().enumerate() {
        let (p50, p99) = p50_p99(&all(k));
        let per_round: Vec<f64> = (0..rounds)
            .map(|r| ratio(p50_p99(&samples[r][k]).0, p50_p99(&samples[r][0]).0))
            .collect();
        let (lo, hi) = per_round
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        rows.push(vec![
            op.label().to_owned(),
            op.statements().to_string(),
            ms(p50),
            ms(p99),
            ms(p50 / op.statements()),
            format!("{:.2}×", ratio(p50, floor50)),
            format!("{:.2}×", ratio(p99, floor99)),
            format!("{lo:.2}–{hi:.2}×"),
        ]);
    }
    table(
        &[
            "operation",
            "statements",
            "p50",
            "p99",
            "p50 per statement",
            "p50 ÷ floor",
            "p99 ÷ floor",
            "per-round p50 ÷ floor",
        ],
        &rows,
    );
    let (cr50, _) = p50_p99(&all(1));
    let r = ratio(cr50, floor50);
    println!(
        "Target claim + release ≤ 1.15× the floor (p50): **{}** ({r:.2}×).\n",
        if r <= 1.15 { "met" } else { "missed" }
    );
    let plain = Op::ALL.iter().position(|&o| o == Op::ClaimRunRelease).unwrap_or(2);
    let recorded = Op::ALL
        .iter()
        .position(|&o| o == Op::ClaimRunReleaseRecorded)
        .unwrap_or(3);
    let h = ratio(p50_p99(&all(recorded)).0, p50_p99(&all(plain)).0);
    let per_round: Vec<f64> = (0..rounds)
        .map(|r| ratio(p50_p99(&samples[r][recorded]).0, p50_p99(&samples[r][plain]).0))
        .collect();
    let (lo, hi) = per_round
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    println!(
        "Target: the history row adds ≤ 5 % to claim + release (p50, interleaved): **{}** ({h:.3}×; per round {lo:.2}–{hi:.2}×).\n",
        if h <= 1.05 { "met" } else { "missed" }
    );
    if stats {
        println!(
            "Server side, each operation run alone (from `pg_stat_statements`; execution time excludes the commit's WAL flush):\n"
        );
        let n = if b.smoke { 40.0 } else { 200.0 };
        let rows: Vec<Vec<String>> = Op::ALL
            .iter()
            .zip(&server)
            .map(|(op, s)| {
                vec![
                    op.label().to_owned(),
                    format!("{:.2}", s.calls as f64 / n),
                    format!("{:.1} µs", s.exec_ms * 1000.0 / n),
                    format!("{:.1}", s.wal_records as f64 / n),
                    format!("{:.0}", s.wal_bytes / n),
                ]
            })
            .collect();
        table(
            &[
                "operation",
                "statements",
                "server execution time",
                "WAL records",
                "WAL bytes",
            ],
            &rows,
        );
    }
    pool.close().await;
    drop_db(db).await;
}
