//! Round trip (section 1 of the output): claim + release against the physical
//! floor (two committed single-row `UPDATE`s), interleaved, plus each
//! operation's server-side cost. Leasehold runs on a store that owns its
//! connections (the runtime's default) and, for comparison, on a store over
//! the floor's own pool (shared: each statement probed first). No pool pings
//! an idle connection before handing it out (`test_before_acquire(false)`,
//! as the owned store does), so every statement is one round trip on both
//! sides.

use std::time::{Duration, Instant};

use leasehold::store::{Claim, Due, LeaseStore};
use sqlx::PgPool;

use crate::report::{ms, p50_p99, progress, ratio, table};
use crate::setup::{Bench, drop_db, fresh_db};
use crate::stats::{ANY_SQL, reset_statement_stats, statement_totals};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Floor,
    ClaimRelease,
    ClaimReleaseShared,
    ClaimRunRelease,
    ClaimRunReleaseBatched,
    ClaimRunReleaseRecorded,
    Select1,
    LosingClaim,
}

impl Op {
    const ALL: [Op; 8] = [
        Op::Floor,
        Op::ClaimRelease,
        Op::ClaimReleaseShared,
        Op::ClaimRunRelease,
        Op::ClaimRunReleaseBatched,
        Op::ClaimRunReleaseRecorded,
        Op::Select1,
        Op::LosingClaim,
    ];

    fn label(self) -> &'static str {
        match self {
            Op::Floor => "floor: 2 × committed single-row `UPDATE`",
            Op::ClaimRelease => "leasehold `claim` + `release` (owned connections)",
            Op::ClaimReleaseShared => "leasehold `claim` + `release` (shared pool: probe before each statement)",
            Op::ClaimRunRelease => "`claim_run(Due::Now)` + `release` (owned; its own release statement)",
            Op::ClaimRunReleaseBatched => {
                "`claim_run(Due::Now)` + the runtime's batched release, no history (owned; `release` before)"
            }
            Op::ClaimRunReleaseRecorded => {
                "`claim_run(Due::Now)` + the batched release writing the run's history row (owned; the runtime's path)"
            }
            Op::Select1 => "`SELECT 1` (reference)",
            Op::LosingClaim => "`claim` that loses (`HeldElsewhere`, owned)",
        }
    }

    fn statements(self) -> u32 {
        match self {
            Op::Floor
            | Op::ClaimRelease
            | Op::ClaimReleaseShared
            | Op::ClaimRunRelease
            | Op::ClaimRunReleaseBatched
            | Op::ClaimRunReleaseRecorded
            // The claim's `UPDATE` alone, then the whole claim for the answer.
            | Op::LosingClaim => 2,
            Op::Select1 => 1,
        }
    }
}

const RT_TTL: Duration = Duration::from_secs(60);

/// Run numbers for the recorded releases: the ring (100 rows) fills, then
/// each run overwrites the one 100 runs older, as in steady state.
static RUN_NO: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// The stores under test: `owned` on connections of its own, `shared` over
/// the floor's pool.
struct Stores {
    owned: LeaseStore,
    shared: LeaseStore,
}

async fn claim_release(store: &LeaseStore) {
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

async fn run_op(op: Op, stores: &Stores, pool: &PgPool) {
    let store = &stores.owned;
    match op {
        Op::Floor => {
            for _ in 0..2 {
                sqlx::query("UPDATE bench_floor SET n = n + 1 WHERE id = 1")
                    .execute(pool)
                    .await
                    .expect("floor update");
            }
        }
        Op::ClaimRelease => claim_release(store).await,
        Op::ClaimReleaseShared => claim_release(&stores.shared).await,
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
        Op::ClaimRunReleaseBatched => {
            let lease = store
                .claim_run("rt-batched", "bench", RT_TTL, Due::Now)
                .await
                .expect("claim_run")
                .acquired()
                .expect("the key is free");
            assert!(store.release_batched(&lease).await.expect("release"));
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
                    .release_recorded(&lease, run_no, leasehold::runtime::DEFAULT_HISTORY)
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
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .test_before_acquire(false)
        .connect_with(db.options.clone())
        .await
        .expect("floor pool");
    let stores = Stores {
        owned: LeaseStore::connect(db.options.clone()).await.expect("owned store"),
        shared: LeaseStore::new(pool.clone()),
    };
    let store = &stores.owned;
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
            run_op(op, &stores, &pool).await;
        }
    }
    // samples[round][op]
    let mut samples = vec![vec![Vec::with_capacity(iters); Op::ALL.len()]; rounds];
    for round in samples.iter_mut() {
        for i in 0..iters {
            for j in 0..Op::ALL.len() {
                let k = (i + j) % Op::ALL.len();
                let t = Instant::now();
                run_op(Op::ALL[k], &stores, &pool).await;
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
                run_op(op, &stores, &pool).await;
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
         (A B C …, B C … A, …), one caller at a time. The floor's pool and the owned store's have 2 connections each, \
         neither pinging idle connections before use (`test_before_acquire(false)`); the shared store runs on the floor's pool. \
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
    let at = |op: Op| Op::ALL.iter().position(|&o| o == op).unwrap_or(0);
    // p50 of `a` ÷ p50 of `b` over all rounds, and its range per round.
    let compare = |a: Op, b: Op| {
        let (a, b) = (at(a), at(b));
        let per_round: Vec<f64> = (0..rounds)
            .map(|r| ratio(p50_p99(&samples[r][a]).0, p50_p99(&samples[r][b]).0))
            .collect();
        let (lo, hi) = per_round
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        (ratio(p50_p99(&all(a)).0, p50_p99(&all(b)).0), lo, hi)
    };
    let (r, lo, hi) = compare(Op::ClaimRelease, Op::Floor);
    println!(
        "Target claim + release (owned connections) ≤ 1.15× the floor (p50): **{}** ({r:.2}×; per round \
         {lo:.2}–{hi:.2}×).\n",
        if r <= 1.15 { "met" } else { "missed" }
    );
    let (r, lo, hi) = compare(Op::ClaimReleaseShared, Op::Floor);
    println!(
        "The same on the shared pool, each statement probed first: {r:.2}× the floor (per round {lo:.2}–{hi:.2}×).\n"
    );
    let (h, lo, hi) = compare(Op::ClaimRunReleaseRecorded, Op::ClaimRunReleaseBatched);
    println!(
        "Target: the history row adds ≤ 5 % to claim + release (p50, interleaved): **{}** ({h:.3}×; per round {lo:.2}–{hi:.2}×).\n",
        if h <= 1.05 { "met" } else { "missed" }
    );
    let (p, lo, hi) = compare(Op::ClaimRunRelease, Op::ClaimRunReleaseBatched);
    println!(
        "`release`'s own statement ÷ the batched release it sent before (`claim_run` + release, p50, interleaved): \
         {p:.3}× (per round {lo:.2}–{hi:.2}×).\n"
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
