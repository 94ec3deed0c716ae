//! leasehold's benchmarks (DESIGN §8): every scenario side by side with its
//! baseline, interleaved (A B A B …), as Markdown tables.
//!
//! ```sh
//! cargo bench --bench leasehold               # full run (a few minutes)
//! cargo bench --bench leasehold -- --smoke    # tiny sizes, for CI (well under a minute)
//! cargo bench --bench leasehold -- renewal    # only the scenarios whose name contains "renewal"
//! ```
//!
//! Unless `DATABASE_URL` is set, a throwaway *durable* PostgreSQL cluster is
//! started (fsync and synchronous commit on), so every committed write pays
//! for its WAL flush. Each scenario gets its own fresh database.
//!
//! The run exits non-zero only if a *safety* invariant is violated (two runs
//! of one key in one schedule slot, or a stalled holder still running when
//! another replica takes over). Performance targets are reported, never
//! enforced.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::future::{BoxFuture, join_all};
use leasehold::{
    CancelReason, Claim, Due, FenceGuard, FencedJob, JobError, JobSettings, LeaseStore, Renewal, Runtime, Schedule,
};
use leasehold_testkit::{PgCluster, TestDb, create_db};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgPool};
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------
// Setup, statistics and output
// ---------------------------------------------------------------------------

/// What every scenario needs.
struct Bench {
    smoke: bool,
    server: PgConnectOptions,
    /// Set when a safety invariant was violated: the process exits 1.
    violated: AtomicBool,
}

impl Bench {
    fn violation(&self, what: String) {
        println!("\n**SAFETY VIOLATION**: {what}\n");
        self.violated.store(true, Ordering::SeqCst);
    }
}

/// A fresh database with leasehold's schema and `pg_stat_statements`.
async fn fresh_db(server: &PgConnectOptions) -> (TestDb, bool) {
    let db = create_db(server).await;
    leasehold::migrate(&db.pool).await.expect("migrate");
    let stats = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&db.pool)
        .await
        .is_ok()
        && sqlx::query("SELECT count(*) FROM pg_stat_statements")
            .execute(&db.pool)
            .await
            .is_ok();
    (db, stats)
}

/// Drops a scenario's database (its pools must be closed or idle).
async fn drop_db(server: &PgConnectOptions, db: TestDb) {
    db.pool.close().await;
    if let Ok(mut admin) = server.connect().await {
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", db.name);
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await;
    }
}

/// Clears `pg_stat_statements` for this database only.
async fn reset_stats(pool: &PgPool) {
    sqlx::query(
        "SELECT pg_stat_statements_reset(0::oid, (SELECT oid FROM pg_database WHERE datname = current_database()), 0::int8)",
    )
    .execute(pool)
    .await
    .expect("pg_stat_statements_reset");
}

/// Sums of `pg_stat_statements` for this database since the last reset.
#[derive(Debug, Default, Clone, Copy)]
struct StatTotals {
    calls: i64,
    exec_ms: f64,
    wal_records: i64,
    wal_bytes: f64,
}

/// Statement totals for this database, for statements whose text matches
/// the SQL `LIKE` pattern `like` (the statistics queries themselves excluded).
async fn stat_totals(pool: &PgPool, like: &str) -> StatTotals {
    let row: (i64, f64, i64, f64) = sqlx::query_as(
        "SELECT COALESCE(sum(s.calls), 0)::int8, COALESCE(sum(s.total_exec_time), 0)::float8,
                COALESCE(sum(s.wal_records), 0)::int8, COALESCE(sum(s.wal_bytes), 0)::float8
           FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = current_database() AND s.query LIKE $1
            AND s.query NOT LIKE '%pg_stat_statements%'",
    )
    .bind(like)
    .fetch_one(pool)
    .await
    .expect("read pg_stat_statements");
    StatTotals {
        calls: row.0,
        exec_ms: row.1,
        wal_records: row.2,
        wal_bytes: row.3,
    }
}

/// `LIKE` patterns that identify leasehold's statements (texts from src/lease.rs).
const CLAIM_RUN_SQL: &str = "%$4 OR l.next_due_at IS NULL%";
const RELEASE_SQL: &str = "%GREATEST(clock_timestamp(), acquired_at%";
const RENEW_SQL: &str = "%unnest($2::text[]%";
const ANY_SQL: &str = "%";
const PROBE_SQL: &str = "SELECT $1";

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50 and p99 of unsorted samples.
fn p50_p99(samples: &[Duration]) -> (Duration, Duration) {
    let mut s = samples.to_vec();
    s.sort();
    (pct(&s, 0.50), pct(&s, 0.99))
}

fn median_f64(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[(v.len() - 1) / 2] }
}

/// A duration in ms (µs below 0.1 ms would hide nothing useful here).
fn ms(d: Duration) -> String {
    let m = d.as_secs_f64() * 1000.0;
    if m < 10.0 {
        format!("{m:.3} ms")
    } else if m < 10_000.0 {
        format!("{m:.1} ms")
    } else {
        format!("{:.2} s", m / 1000.0)
    }
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}

/// Prints one Markdown table.
fn table(header: &[&str], rows: &[Vec<String>]) {
    println!("| {} |", header.join(" | "));
    println!("|{}", header.iter().map(|_| "---|").collect::<String>());
    for row in rows {
        println!("| {} |", row.join(" | "));
    }
    println!();
}

fn progress(msg: &str) {
    eprintln!("[bench {:>7.1}s] {msg}", started_at().elapsed().as_secs_f64());
}

fn started_at() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// CPU time (user + system) of this process, from /proc (Linux; zero elsewhere).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
    let f: Vec<u64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // Fields 14 and 15 (utime, stime) are indexes 11 and 12 after the ")"; USER_HZ is 100 on Linux.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// (busy, total) jiffies of the whole machine, from /proc/stat.
fn machine_cpu() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or("");
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = f.iter().take(8).sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// CPU use over a window: this process in cores, the whole machine in %.
struct CpuWindow {
    proc0: Duration,
    mach0: (u64, u64),
    t0: Instant,
}

impl CpuWindow {
    fn start() -> Self {
        CpuWindow {
            proc0: process_cpu(),
            mach0: machine_cpu(),
            t0: Instant::now(),
        }
    }

    /// "bench process x.xx cores, machine yy% busy".
    fn end(&self) -> String {
        let cores = (process_cpu() - self.proc0).as_secs_f64() / self.t0.elapsed().as_secs_f64();
        let (b1, t1) = machine_cpu();
        let busy = (b1 - self.mach0.0) as f64 / (t1 - self.mach0.1).max(1) as f64 * 100.0;
        format!("{cores:.2} cores / {busy:.0}%")
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Polls `check` every 2 ms until it returns `Some`, or `None` after `within`.
async fn wait_for<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

// ---------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------

type Body = Arc<dyn Fn(FenceGuard) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

/// A job whose body is a closure, so each scenario scripts its behaviour.
#[derive(Clone)]
struct BenchJob {
    name: String,
    key: String,
    settings: JobSettings,
    body: Body,
}

impl FencedJob for BenchJob {
    fn name(&self) -> &str {
        &self.name
    }
    fn key(&self) -> String {
        self.key.clone()
    }
    fn settings(&self) -> JobSettings {
        self.settings.clone()
    }
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        (self.body)(guard).await
    }
}

fn bench_job<F, Fut>(name: &str, key: String, settings: JobSettings, body: F) -> BenchJob
where
    F: Fn(FenceGuard) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    BenchJob {
        name: name.to_owned(),
        key,
        settings,
        body: Arc::new(move |guard| Box::pin(body(guard))),
    }
}

/// A runtime named `holder` on `pool` with `jobs`.
async fn runtime(pool: PgPool, holder: &str, poll: Option<Duration>, jobs: Vec<BenchJob>) -> Runtime {
    let mut builder = Runtime::builder(pool).holder(holder);
    if let Some(poll) = poll {
        builder = builder.poll_interval(poll);
    }
    for job in jobs {
        builder = builder.register(job);
    }
    builder.start().await.expect("runtime starts")
}

/// Concurrency gauge: current and maximum.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Gauge {
    fn inc(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }
    fn dec(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

/// Sends `SELECT 1` through `pool` every `every` (each in its own task, so a
/// stuck probe does not delay the next) until stopped.
struct Probes {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<Vec<Option<Duration>>>,
}

impl Probes {
    fn start(pool: PgPool, every: Duration, timeout: Duration) -> Self {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let handle = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut probes = Vec::new();
            loop {
                tokio::select! {
                    _ = stopped.cancelled() => break,
                    _ = tick.tick() => {
                        let pool = pool.clone();
                        probes.push(tokio::spawn(async move {
                            let t = Instant::now();
                            let probe = sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&pool);
                            match tokio::time::timeout(timeout, probe).await {
                                Ok(Ok(_)) => Some(t.elapsed()),
                                _ => None,
                            }
                        }));
                    }
                }
            }
            let mut out = Vec::with_capacity(probes.len());
            for p in probes {
                out.push(p.await.unwrap_or(None));
            }
            out
        });
        Probes { stop, handle }
    }

    /// Stops sending and waits for the probes in flight: (latencies, timed out).
    async fn finish(self) -> (Vec<Duration>, usize) {
        self.stop.cancel();
        let all = self.handle.await.unwrap_or_default();
        let timed_out = all.iter().filter(|p| p.is_none()).count();
        (all.into_iter().flatten().collect(), timed_out)
    }
}

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------

const SCENARIOS: [&str; 6] = [
    "round-trip",
    "renewal",
    "pool-pressure",
    "contention",
    "handover",
    "throughput",
];

#[tokio::main]
async fn main() {
    started_at();
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let selected = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    if let Some(unknown) = filters
        .iter()
        .find(|f| !SCENARIOS.iter().any(|s| s.contains(f.as_str())))
    {
        eprintln!("no scenario matches {unknown:?}; scenarios: {}", SCENARIOS.join(", "));
        std::process::exit(2);
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }

    let cluster = match std::env::var("DATABASE_URL") {
        Ok(_) => None,
        Err(_) => {
            progress("starting a throwaway durable PostgreSQL (fsync on)");
            let started = tokio::task::spawn_blocking(PgCluster::start_durable)
                .await
                .expect("start_durable task");
            Some(started.unwrap_or_else(|e| panic!("{e}")))
        }
    };
    let server = match &cluster {
        Some(c) => c.options(),
        None => leasehold_testkit::server_options(),
    };
    let bench = Bench {
        smoke,
        server,
        violated: AtomicBool::new(false),
    };
    header(&bench, &args, cluster.is_some()).await;

    if selected("round-trip") {
        round_trip(&bench).await;
    }
    if selected("renewal") {
        renewal(&bench).await;
    }
    if selected("pool-pressure") {
        pool_pressure(&bench).await;
    }
    if selected("contention") {
        contention(&bench).await;
    }
    if selected("handover") {
        handover(&bench).await;
    }
    if selected("throughput") {
        throughput(&bench).await;
    }
    println!(
        "_Finished in {:.0} s; load average at the end: {}._",
        started_at().elapsed().as_secs_f64(),
        loadavg()
    );
    drop(cluster);
    if bench.violated.load(Ordering::SeqCst) {
        eprintln!("a safety invariant was violated (see above)");
        std::process::exit(1);
    }
}

/// The exact command, the machine and the server.
async fn header(bench: &Bench, args: &[String], throwaway: bool) {
    let mut conn = bench.server.connect().await.expect("connect to PostgreSQL");
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut conn)
        .await
        .expect("server_version");
    let mut settings = Vec::new();
    for name in [
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "shared_buffers",
        "max_connections",
    ] {
        let value: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {name}")))
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|_| "?".into());
        settings.push(format!("{name}={value}"));
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let command = if args.is_empty() {
        "cargo bench --bench leasehold".to_owned()
    } else {
        format!("cargo bench --bench leasehold -- {}", args.join(" "))
    };
    println!("# leasehold benchmarks{}\n", if bench.smoke { " (smoke)" } else { "" });
    println!("- command: `{command}`");
    println!(
        "- machine: {nproc} CPUs ({cpu}), Linux {kernel}, load average at start {}",
        loadavg()
    );
    println!(
        "- PostgreSQL {version} ({}), {}",
        if throwaway {
            "throwaway cluster from leasehold-testkit `PgCluster::start_durable()`, same machine, loopback TCP"
        } else {
            "DATABASE_URL"
        },
        settings.join(", ")
    );
    println!("- client: sqlx pools with default options (each acquire of an idle connection sends a Sync ping first)");
    println!("- percentiles are nearest-rank over all samples of all interleaved rounds\n");
}

// ---------------------------------------------------------------------------
// 1. Round trip
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Floor,
    ClaimRelease,
    ClaimRunRelease,
    Select1,
    LosingClaim,
}

impl Op {
    const ALL: [Op; 5] = [
        Op::Floor,
        Op::ClaimRelease,
        Op::ClaimRunRelease,
        Op::Select1,
        Op::LosingClaim,
    ];

    fn label(self) -> &'static str {
        match self {
            Op::Floor => "floor: 2 × committed single-row `UPDATE`",
            Op::ClaimRelease => "leasehold `claim` + `release`",
            Op::ClaimRunRelease => "leasehold `claim_run(Due::Now)` + `release` (a runtime run's path)",
            Op::Select1 => "`SELECT 1` (reference)",
            Op::LosingClaim => "`claim` that loses (`HeldElsewhere`)",
        }
    }

    fn statements(self) -> u32 {
        match self {
            Op::Floor | Op::ClaimRelease | Op::ClaimRunRelease => 2,
            Op::Select1 | Op::LosingClaim => 1,
        }
    }
}

const RT_TTL: Duration = Duration::from_secs(60);

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

async fn round_trip(b: &Bench) {
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
            reset_stats(&pool).await;
            for _ in 0..n {
                run_op(op, &store, &pool).await;
            }
            server.push(stat_totals(&pool, ANY_SQL).await);
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
         (A B C D E, B C D E A, …). One pool of 2 connections, one caller at a time. \
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
    drop_db(&b.server, db).await;
}

// ---------------------------------------------------------------------------
// 2. Renewal cost
// ---------------------------------------------------------------------------

/// The text of `LeaseStore::renew_many`'s statement, to time it alone and
/// to EXPLAIN it: the library's own constant, so the two never drift.
const RENEW_MANY_SQL: &str = LeaseStore::RENEW_MANY_SQL;

/// `busy`, then the lease row and the server's clock.
type LeaseRowTuple = (
    bool,
    String,
    String,
    i64,
    DateTime<Utc>,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    DateTime<Utc>,
);

async fn renewal(b: &Bench) {
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
        // N leases of one holder, as N claims would leave them (one statement here to save time).
        let tenures: Vec<(String, i64)> = sqlx::query_as(
            "INSERT INTO leasehold_lease (key, holder, fence, acquired_at, expires_at)
             SELECT 'renew-' || $1 || '-' || g, $1, nextval('leasehold_fence_seq'), clock_timestamp(),
                    clock_timestamp() + interval '10 minutes'
               FROM generate_series(1, $2) g
             RETURNING key, fence",
        )
        .bind(&holder)
        .bind(n as i32)
        .fetch_all(&pool)
        .await
        .expect("insert leases");
        let leases = store
            .renew_many(&holder, &tenures, ttl)
            .await
            .expect("renew_many")
            .renewed;
        assert_eq!(leases.len(), n);
        sqlx::raw_sql("VACUUM ANALYZE leasehold_lease")
            .execute(&pool)
            .await
            .expect("vacuum");
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
                    reset_stats(&pool).await;
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
                        let out: Vec<LeaseRowTuple> = sqlx::query_as(RENEW_MANY_SQL)
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
                    let calls = Some(stat_totals(&pool, RENEW_SQL).await.calls);
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
            format!("{n} × `renew` (the article's way)"),
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
    drop_db(&b.server, db).await;
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

// ---------------------------------------------------------------------------
// 3. Pool pressure
// ---------------------------------------------------------------------------

/// What one phase of the pool-pressure scenario saw.
#[derive(Default)]
struct PressureOutcome {
    max_running: usize,
    started: usize,
    gave_up: usize,
    cancelled: usize,
    start_delays: Vec<Duration>,
    probes: Vec<Duration>,
    probes_timed_out: usize,
    statements: Option<i64>,
    phase: Duration,
}

/// Shared by the jobs of one phase.
#[derive(Default)]
struct PressureState {
    running: Gauge,
    finished: AtomicUsize,
    cancelled: AtomicUsize,
    gave_up: AtomicUsize,
    delays: Mutex<Vec<Duration>>,
    t0: Mutex<Option<Instant>>,
}

impl PressureState {
    fn started(&self) {
        self.running.inc();
        if let Some(t0) = *self.t0.lock().unwrap() {
            self.delays.lock().unwrap().push(t0.elapsed());
        }
    }
}

/// The article's key hash: FNV-1a 32 bits, as a non-negative bigint.
fn fnv32(key: &str) -> i64 {
    let mut h: u32 = 0x811c_9dc5;
    for b in key.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    i64::from(h)
}

async fn pool_pressure(b: &Bench) {
    progress("3. pool pressure");
    let (db, stats) = fresh_db(&b.server).await;
    let (sizes, work, rounds): (&[usize], Duration, usize) = if b.smoke {
        (&[2, 20], Duration::from_secs(1), 1)
    } else {
        (&[2, 100, 1_000], Duration::from_secs(5), 2)
    };
    let window = work / 2;
    let mut results: BTreeMap<(usize, &str), Vec<PressureOutcome>> = BTreeMap::new();
    for &k in sizes {
        for round in 0..rounds {
            let order: [&str; 2] = if round % 2 == 0 {
                ["leasehold", "pinned"]
            } else {
                ["pinned", "leasehold"]
            };
            for which in order {
                progress(&format!("   K = {k}, round {round}, {which}"));
                let out = if which == "leasehold" {
                    pressure_leasehold(&db, stats, k, work, round).await
                } else {
                    pressure_pinned(&db, stats, k, work, window, round).await
                };
                results.entry((k, which)).or_default().push(out);
            }
        }
    }
    println!(
        "## 3. Pool pressure: K jobs of {} s each on a pool of 2 connections\n",
        work.as_secs()
    );
    println!(
        "leasehold: one `Runtime` (default poll interval, lease 3 s so the heartbeat ticks every 1 s while the jobs \
         run) with K `Schedule::Manual` jobs, all triggered at once (`trigger` × K, concurrently). Pinned: the \
         article's fix, for each job `pool.acquire()`, `SELECT pg_try_advisory_lock($1)` on that connection, hold \
         it for the job, `SELECT pg_advisory_unlock($1)` on the same connection, return it; a job that gets no \
         connection within {} s gives up its turn (a scheduler that waited instead would need ⌈K/2⌉ × {} s to run \
         them all). Meanwhile an unrelated `SELECT 1` goes through the same pool every 50 ms (timeout {} s). \
         {rounds} round(s) per K, approaches alternating; counts are medians over rounds, latencies pooled.\n",
        window.as_secs_f64(),
        work.as_secs(),
        (work * 2).as_secs()
    );
    let mut rows = Vec::new();
    for &k in sizes {
        for which in ["leasehold", "pinned"] {
            let outs = &results[&(k, which)];
            let med = |f: &dyn Fn(&PressureOutcome) -> usize| {
                let mut v: Vec<usize> = outs.iter().map(f).collect();
                v.sort();
                v[(v.len() - 1) / 2]
            };
            let delays: Vec<Duration> = outs.iter().flat_map(|o| o.start_delays.clone()).collect();
            let probes: Vec<Duration> = outs.iter().flat_map(|o| o.probes.clone()).collect();
            let (d50, _) = p50_p99(&delays);
            let dmax = delays.iter().max().copied().unwrap_or_default();
            let (q50, q99) = p50_p99(&probes);
            let timed_out: usize = outs.iter().map(|o| o.probes_timed_out).sum();
            let total: usize = outs.iter().map(|o| o.probes_timed_out + o.probes.len()).sum();
            let statements = outs
                .iter()
                .filter_map(|o| o.statements)
                .max()
                .map_or("n/a".into(), |s| s.to_string());
            let phase = outs.iter().map(|o| o.phase).max().unwrap_or_default();
            rows.push(vec![
                k.to_string(),
                if which == "leasehold" {
                    "leasehold runtime".into()
                } else {
                    "pinned connection + advisory lock".into()
                },
                med(&|o| o.max_running).to_string(),
                med(&|o| o.started).to_string(),
                med(&|o| o.gave_up).to_string(),
                med(&|o| o.cancelled).to_string(),
                format!("{} / {}", ms(d50), ms(dmax)),
                ms(q50),
                ms(q99),
                format!("{timed_out} / {total}"),
                statements,
                ms(phase),
            ]);
        }
    }
    table(
        &[
            "K",
            "approach",
            "max running at once",
            "started",
            "could not start",
            "runs cancelled",
            "start delay p50 / max",
            "`SELECT 1` p50",
            "`SELECT 1` p99",
            "probes timed out",
            "statements in phase (probes excluded)",
            "phase length",
        ],
        &rows,
    );
    drop_db(&b.server, db).await;
}

async fn pressure_leasehold(db: &TestDb, stats: bool, k: usize, work: Duration, round: usize) -> PressureOutcome {
    let pool = db.pool_with(2).await;
    let state = Arc::new(PressureState::default());
    let keys: Vec<String> = (0..k).map(|i| format!("pp-{k}-{round}-{i}")).collect();
    let settings = JobSettings::new(Schedule::Manual).lease(Duration::from_secs(3));
    let jobs = keys
        .iter()
        .map(|key| {
            let state = state.clone();
            bench_job("pressure", key.clone(), settings.clone(), move |guard: FenceGuard| {
                let state = state.clone();
                async move {
                    state.started();
                    let result = tokio::select! {
                        _ = tokio::time::sleep(work) => Ok(()),
                        _ = guard.cancelled() => {
                            state.cancelled.fetch_add(1, Ordering::SeqCst);
                            Err("cancelled".into())
                        }
                    };
                    state.running.dec();
                    state.finished.fetch_add(1, Ordering::SeqCst);
                    result
                }
            })
        })
        .collect();
    let rt = runtime(pool.clone(), &format!("pressure-{k}-{round}"), None, jobs).await;
    // Let the job loops' first (not-due) claims go through before measuring.
    tokio::time::sleep(Duration::from_millis(300) + Duration::from_millis(k as u64)).await;
    if stats {
        reset_stats(&pool).await;
    }
    let probes = Probes::start(pool.clone(), Duration::from_millis(50), work * 2);
    let t0 = Instant::now();
    *state.t0.lock().unwrap() = Some(t0);
    let triggers = join_all(keys.iter().map(|key| rt.trigger(key))).await;
    assert!(triggers.iter().all(Result::is_ok), "trigger failed");
    let done = wait_for(work + Duration::from_secs(60), || {
        (state.finished.load(Ordering::SeqCst) >= k).then_some(())
    })
    .await;
    let phase = t0.elapsed();
    let (probe_lat, timed_out) = probes.finish().await;
    let statements = if stats {
        Some(stat_totals(&pool, ANY_SQL).await.calls - stat_totals(&pool, PROBE_SQL).await.calls)
    } else {
        None
    };
    rt.shutdown().await;
    pool.close().await;
    let started = state.delays.lock().unwrap().len();
    if done.is_none() {
        eprintln!("   leasehold K={k}: only {started} of {k} runs finished in time");
    }
    PressureOutcome {
        max_running: state.running.max(),
        started,
        gave_up: k - started,
        cancelled: state.cancelled.load(Ordering::SeqCst),
        start_delays: state.delays.lock().unwrap().clone(),
        probes: probe_lat,
        probes_timed_out: timed_out,
        statements,
        phase,
    }
}

async fn pressure_pinned(
    db: &TestDb,
    stats: bool,
    k: usize,
    work: Duration,
    window: Duration,
    round: usize,
) -> PressureOutcome {
    let pool = db.pool_with(2).await;
    let state = Arc::new(PressureState::default());
    if stats {
        reset_stats(&pool).await;
    }
    let probes = Probes::start(pool.clone(), Duration::from_millis(50), work * 2);
    let t0 = Instant::now();
    *state.t0.lock().unwrap() = Some(t0);
    let jobs: Vec<_> = (0..k)
        .map(|i| {
            let (pool, state) = (pool.clone(), state.clone());
            let lock = fnv32(&format!("pp-pinned-{k}-{round}-{i}"));
            tokio::spawn(async move {
                // Reserve a dedicated connection for the whole job.
                let mut conn = match tokio::time::timeout(window, pool.acquire()).await {
                    Ok(Ok(conn)) => conn,
                    _ => {
                        state.gave_up.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                };
                let acquired: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(lock)
                    .fetch_one(&mut *conn)
                    .await
                    .expect("pg_try_advisory_lock");
                if !acquired {
                    state.gave_up.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                state.started();
                tokio::time::sleep(work).await;
                state.running.dec();
                let unlocked: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                    .bind(lock)
                    .fetch_one(&mut *conn)
                    .await
                    .expect("pg_advisory_unlock");
                assert!(unlocked, "unlock on the pinned connection");
                drop(conn);
                state.finished.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for job in jobs {
        let _ = job.await;
    }
    let phase = t0.elapsed();
    let (probe_lat, timed_out) = probes.finish().await;
    let statements = if stats {
        Some(stat_totals(&pool, ANY_SQL).await.calls - stat_totals(&pool, PROBE_SQL).await.calls)
    } else {
        None
    };
    pool.close().await;
    let started = state.delays.lock().unwrap().len();
    PressureOutcome {
        max_running: state.running.max(),
        started,
        gave_up: state.gave_up.load(Ordering::SeqCst),
        cancelled: 0,
        start_delays: state.delays.lock().unwrap().clone(),
        probes: probe_lat,
        probes_timed_out: timed_out,
        statements,
        phase,
    }
}

// ---------------------------------------------------------------------------
// 4. Contention and 6. Throughput: many runtimes, scheduled jobs
// ---------------------------------------------------------------------------

/// One run as its job saw it.
#[derive(Debug, Clone, Copy)]
struct RunRec {
    runtime: usize,
    key: usize,
    /// Schedule slot of the run, from the server time of its claim.
    slot: i64,
    at: Instant,
    fence: i64,
    /// The tenure's `acquired_at` (server clock), µs since the epoch, read as
    /// `expires_at − lease` (a few µs after the real `acquired_at` at most).
    acquired_us: i64,
    /// Wall clock when the run started (the server runs on this machine), µs.
    wall_us: i64,
}

/// What a fleet of runtimes did during a measurement window.
struct FleetOutcome {
    window: Duration,
    runs_in_window: usize,
    per_runtime: Vec<usize>,
    max_per_slot: usize,
    /// Shortest time between the starts of two consecutive runs of one key.
    min_gap: Duration,
    /// Consecutive runs of one key whose claims passed the due check in the same slot for certain.
    certain_doubles: usize,
    /// The runs of (key, slot)s that ran more than once, for the report.
    duplicates: Vec<String>,
    slots_expected: usize,
    slots_covered: usize,
    claims: Option<i64>,
    releases: Option<i64>,
    renewals: Option<i64>,
    statements: Option<i64>,
    cpu: String,
}

/// Starts `r` runtimes (each on its own pool of `conns`) with `keys` jobs
/// every `period`, waits `warmup`, measures for `window`, shuts down.
#[allow(clippy::too_many_arguments)]
async fn fleet(
    db: &TestDb,
    stats: bool,
    tag: &str,
    r: usize,
    keys: usize,
    period: Duration,
    body_sleep: Option<Duration>,
    conns: u32,
    warmup: Duration,
    window: Duration,
) -> FleetOutcome {
    let lease = Duration::from_secs(10);
    let runs: Arc<Mutex<Vec<RunRec>>> = Arc::default();
    let period_ms = period.as_millis() as i64;
    let mut runtimes = Vec::new();
    let mut pools = Vec::new();
    for i in 0..r {
        let jobs = (0..keys)
            .map(|j| {
                let runs = runs.clone();
                let settings = JobSettings::new(Schedule::every(period)).lease(lease);
                bench_job(tag, format!("{tag}-{j}"), settings, move |guard: FenceGuard| {
                    let runs = runs.clone();
                    async move {
                        let acquired = guard.expires_at() - chrono::Duration::from_std(lease).unwrap_or_default();
                        let rec = RunRec {
                            runtime: i,
                            key: j,
                            slot: acquired.timestamp_millis().div_euclid(period_ms),
                            at: Instant::now(),
                            fence: guard.fence(),
                            acquired_us: acquired.timestamp_micros(),
                            wall_us: Utc::now().timestamp_micros(),
                        };
                        runs.lock().unwrap().push(rec);
                        if let Some(d) = body_sleep {
                            tokio::time::sleep(d).await;
                        }
                        Ok(())
                    }
                })
            })
            .collect();
        let pool = db.pool_with(conns).await;
        pools.push(pool.clone());
        runtimes.push(runtime(pool, &format!("{tag}-r{i}"), None, jobs).await);
    }
    tokio::time::sleep(warmup).await;
    if stats {
        reset_stats(&db.pool).await;
    }
    let cpu = CpuWindow::start();
    let w0 = Instant::now();
    let w0_wall = Utc::now().timestamp_millis();
    tokio::time::sleep(window).await;
    let w1 = Instant::now();
    let w1_wall = Utc::now().timestamp_millis();
    let cpu = cpu.end();
    let (claims, releases, renewals, statements) = if stats {
        (
            Some(stat_totals(&db.pool, CLAIM_RUN_SQL).await.calls),
            Some(stat_totals(&db.pool, RELEASE_SQL).await.calls),
            Some(stat_totals(&db.pool, RENEW_SQL).await.calls),
            Some(stat_totals(&db.pool, ANY_SQL).await.calls),
        )
    } else {
        (None, None, None, None)
    };
    for rt in runtimes {
        rt.shutdown().await;
    }
    for pool in pools {
        pool.close().await;
    }
    let runs = runs.lock().unwrap().clone();
    let in_window: Vec<&RunRec> = runs.iter().filter(|x| x.at >= w0 && x.at < w1).collect();
    let mut per_runtime = vec![0; r];
    for x in &in_window {
        per_runtime[x.runtime] += 1;
    }
    let mut per_slot: HashMap<(usize, i64), usize> = HashMap::new();
    for x in &runs {
        *per_slot.entry((x.key, x.slot)).or_default() += 1;
    }
    // Slots that began and ended inside the window (their runs start within it).
    let first = w0_wall.div_euclid(period_ms) + 1;
    let last = w1_wall.div_euclid(period_ms); // exclusive: the slot under way at w1 may not have run yet
    let full: HashSet<(usize, i64)> = runs
        .iter()
        .filter(|x| x.slot >= first && x.slot < last)
        .map(|x| (x.key, x.slot))
        .collect();
    FleetOutcome {
        window: w1 - w0,
        runs_in_window: in_window.len(),
        per_runtime,
        max_per_slot: per_slot.values().copied().max().unwrap_or(0),
        min_gap: min_gap(&runs),
        certain_doubles: certain_doubles(&runs, period_ms * 1000),
        duplicates: duplicates(&runs, &per_slot, period_ms),
        slots_expected: keys * (last - first).max(0) as usize,
        slots_covered: full.len(),
        claims,
        releases,
        renewals,
        statements,
        cpu,
    }
}

/// Shortest interval between the starts of consecutive runs of one key.
fn min_gap(runs: &[RunRec]) -> Duration {
    let mut by_key: HashMap<usize, Vec<Instant>> = HashMap::new();
    for x in runs {
        by_key.entry(x.key).or_default().push(x.at);
    }
    by_key
        .values_mut()
        .flat_map(|starts| {
            starts.sort();
            starts.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>()
        })
        .min()
        .unwrap_or(Duration::MAX)
}

/// Pairs of consecutive runs of one key whose claims certainly passed the due
/// check in the same slot. Run *i*'s claim cannot pass the check before the
/// due time run *i − 1*'s release left (the next slot after its
/// `acquired_at`, the runtime's rule for a successful run), and run *i + 1*'s
/// claim passes it no later than that run's start. So if that due time and
/// the start of run *i + 1* fall in one slot, both claims passed in that slot.
/// This holds whichever way a claim's `acquired_at` and its due check are
/// ordered. `acquired_us` is `expires_at − lease`, which can be a few µs later
/// than the real `acquired_at` (two `clock_timestamp()` calls), so it is taken
/// [`ACQUIRED_SLACK_US`] earlier: a boundary inside that slack cannot produce a
/// false count.
fn certain_doubles(runs: &[RunRec], period_us: i64) -> usize {
    let mut by_key: HashMap<usize, Vec<&RunRec>> = HashMap::new();
    for x in runs {
        by_key.entry(x.key).or_default().push(x);
    }
    let slot = |us: i64| us.div_euclid(period_us);
    let mut doubles = 0;
    for of_key in by_key.values_mut() {
        of_key.sort_by_key(|x| x.fence);
        for w in of_key.windows(3) {
            let left_due = (slot(w[0].acquired_us - ACQUIRED_SLACK_US) + 1) * period_us;
            if slot(left_due) == slot(w[2].wall_us) {
                doubles += 1;
            }
        }
    }
    doubles
}

/// How much earlier than `expires_at − lease` the real `acquired_at` may be.
const ACQUIRED_SLACK_US: i64 = 1_000;

/// Up to three (key, slot)s with more than one run, each with its runs and
/// the key's next run, as Markdown lines.
fn duplicates(runs: &[RunRec], per_slot: &HashMap<(usize, i64), usize>, period_ms: i64) -> Vec<String> {
    let mut dup: Vec<(usize, i64)> = per_slot.iter().filter(|(_, n)| **n > 1).map(|(k, _)| *k).collect();
    dup.sort();
    let mut out = Vec::new();
    let clock =
        |us: i64| DateTime::from_timestamp_micros(us).map_or("?".into(), |t| t.format("%H:%M:%S%.6f").to_string());
    for (key, slot) in dup.into_iter().take(3) {
        let boundary = (slot + 1) * period_ms * 1000;
        out.push(format!(
            "- key {key}, slot starting {} (next slot boundary {}):",
            clock(slot * period_ms * 1000),
            clock(boundary)
        ));
        let mut of_key: Vec<&RunRec> = runs.iter().filter(|x| x.key == key).collect();
        of_key.sort_by_key(|x| x.at);
        let first = of_key.iter().position(|x| x.slot == slot).unwrap_or(0);
        for x in of_key.iter().skip(first).take(per_slot[&(key, slot)] + 1) {
            out.push(format!(
                "  - runtime {}, fence {}, tenure acquired_at {} (server), run started {} (wall)",
                x.runtime,
                x.fence,
                clock(x.acquired_us),
                clock(x.wall_us)
            ));
        }
    }
    out
}

/// How the two slot checks of the fleet scenarios read.
const SLOT_CHECKS: &str = "\"Max runs in one (key, slot)\" puts each run in the slot of its tenure's `acquired_at`; \
     \"certain double runs\" counts consecutive runs of a key whose claims passed the due check in one slot for \
     certain (see `certain_doubles` in the bench); the second must be 0. The first should be 1 too, since a claim \
     is dated after its due check; the bench reads `acquired_at` as `expires_at − lease`, a few µs late, so a run \
     dated just past a boundary can still show 2 without a double run.";

fn per_run(count: Option<i64>, runs: usize) -> String {
    count.map_or("n/a".into(), |c| format!("{:.2}", c as f64 / runs.max(1) as f64))
}

async fn contention(b: &Bench) {
    progress("4. contention");
    let (db, stats) = fresh_db(&b.server).await;
    let (sizes, keys, warmup, window): (&[usize], usize, Duration, Duration) = if b.smoke {
        (&[1, 4], 10, Duration::from_millis(1500), Duration::from_secs(3))
    } else {
        (&[1, 4, 16], 100, Duration::from_secs(3), Duration::from_secs(10))
    };
    let period = Duration::from_secs(1);
    let mut rows = Vec::new();
    for &r in sizes {
        progress(&format!("   R = {r}"));
        let o = fleet(
            &db,
            stats,
            &format!("ct{r}"),
            r,
            keys,
            period,
            Some(Duration::from_millis(1)),
            4,
            warmup,
            window,
        )
        .await;
        if o.certain_doubles > 0 {
            b.violation(format!(
                "contention R={r}: {} pair(s) of runs of one key certainly in one slot; up to {} runs of one key \
                 share the slot of their tenure's `acquired_at` (shortest gap between two runs of a key: {})\n\n{}",
                o.certain_doubles,
                o.max_per_slot,
                ms(o.min_gap),
                o.duplicates.join("\n")
            ));
        }
        let secs = o.window.as_secs_f64();
        let lost = o.claims.map(|c| c - o.runs_in_window as i64);
        let mut shares: Vec<f64> = o
            .per_runtime
            .iter()
            .map(|&n| 100.0 * n as f64 / o.runs_in_window.max(1) as f64)
            .collect();
        shares.sort_by(f64::total_cmp);
        let active = o.per_runtime.iter().filter(|&&n| n > 0).count();
        rows.push(vec![
            format!("{r} × {keys}"),
            format!("{:.1}", o.runs_in_window as f64 / secs),
            format!("{:.0}", keys as f64 / period.as_secs_f64()),
            format!("{} / {}", o.slots_covered, o.slots_expected),
            o.claims.map_or("n/a".into(), |c| format!("{:.0}", c as f64 / secs)),
            lost.map_or("n/a".into(), |l| format!("{:.0}", l as f64 / secs)),
            per_run(o.claims, o.runs_in_window),
            format!(
                "{active}/{r} ran; share min {:.1}% / median {:.1}% / max {:.1}%",
                shares.first().copied().unwrap_or(0.0),
                median_f64(&shares),
                shares.last().copied().unwrap_or(0.0)
            ),
            o.max_per_slot.to_string(),
            o.certain_doubles.to_string(),
            ms(o.min_gap),
            o.cpu,
        ]);
    }
    println!("## 4. Contention: R runtimes × {keys} jobs, `Schedule::every(1s)`, body ≈ 1 ms\n");
    println!(
        "Every runtime registers the same {keys} keys (lease 10 s, default poll interval 5 s, own pool of 4). \
         Measured over a {} s window after a {} s warm-up. Runs and their slots come from the jobs' own records \
         (slot = the tenure's server `acquired_at` ÷ period); claims from `pg_stat_statements` calls of \
         `claim_run`'s statement; \"lost\" = claims − successful runs (both `HeldElsewhere` and `NotDue`). Ideal: \
         one run per key per slot = {keys} runs/s. {SLOT_CHECKS}\n",
        window.as_secs(),
        warmup.as_secs_f64()
    );
    table(
        &[
            "runtimes × jobs",
            "runs/s",
            "ideal runs/s",
            "slots run / slots in window",
            "claims/s",
            "lost claims/s",
            "claims per run",
            "spread across runtimes",
            "max runs in one (key, slot)",
            "certain double runs",
            "shortest gap between two runs of a key",
            "CPU: bench process / machine",
        ],
        &rows,
    );
    drop_db(&b.server, db).await;
}

async fn throughput(b: &Bench) {
    progress("6. throughput");
    let (db, stats) = fresh_db(&b.server).await;
    let (sizes, warmup, window): (&[usize], Duration, Duration) = if b.smoke {
        (&[50], Duration::from_millis(1500), Duration::from_secs(2))
    } else {
        (&[100, 1_000], Duration::from_secs(3), Duration::from_secs(10))
    };
    let period = Duration::from_millis(100);
    let r = 4;
    let mut rows = Vec::new();
    for &keys in sizes {
        progress(&format!("   {keys} keys"));
        let o = fleet(
            &db,
            stats,
            &format!("tp{keys}"),
            r,
            keys,
            period,
            None,
            4,
            warmup,
            window,
        )
        .await;
        if o.certain_doubles > 0 {
            b.violation(format!(
                "throughput {keys} keys: {} pair(s) of runs of one key certainly in one slot; up to {} runs of one \
                 key share the slot of their tenure's `acquired_at` (shortest gap between two runs of a key: {})\n\n{}",
                o.certain_doubles,
                o.max_per_slot,
                ms(o.min_gap),
                o.duplicates.join("\n")
            ));
        }
        let secs = o.window.as_secs_f64();
        rows.push(vec![
            format!("{r} × {keys}"),
            format!("{:.0}", keys as f64 / period.as_secs_f64()),
            format!("{:.0}", o.runs_in_window as f64 / secs),
            format!(
                "{:.1}%",
                100.0 * o.slots_covered as f64 / o.slots_expected.max(1) as f64
            ),
            per_run(o.claims, o.runs_in_window),
            per_run(o.releases, o.runs_in_window),
            per_run(o.renewals, o.runs_in_window),
            o.statements.map_or("n/a".into(), |s| format!("{:.0}", s as f64 / secs)),
            o.max_per_slot.to_string(),
            o.certain_doubles.to_string(),
            ms(o.min_gap),
            o.cpu,
        ]);
    }
    println!("## 6. Throughput: short runs per second on one PostgreSQL, 4 runtimes\n");
    println!(
        "4 runtimes (own pool of 4 each) all register the same keys, `Schedule::every(100ms)`, lease 10 s, \
         trivial body. Demand = keys × 10 runs/s; measured over {} s after a {} s warm-up, with client and server \
         sharing this machine's CPUs. Claims, releases and renewals per run are `pg_stat_statements` calls ÷ runs. \
         {SLOT_CHECKS}\n",
        window.as_secs(),
        warmup.as_secs_f64()
    );
    table(
        &[
            "runtimes × keys",
            "demand runs/s",
            "runs/s",
            "slots run",
            "claims per run",
            "releases per run",
            "renewals per run",
            "statements/s",
            "max runs in one (key, slot)",
            "certain double runs",
            "shortest gap between two runs of a key",
            "CPU: bench process / machine",
        ],
        &rows,
    );
    drop_db(&b.server, db).await;
}

// ---------------------------------------------------------------------------
// 5. Handover
// ---------------------------------------------------------------------------

/// A run's cancellation as a watcher saw it: holder, instant observed, wall
/// time observed, reason, and the server expiry known then.
type Cancelled = (String, Instant, DateTime<Utc>, Option<CancelReason>, DateTime<Utc>);

/// What the runs of one handover trial saw.
#[derive(Default)]
struct HoldLog {
    started: Mutex<Vec<(String, Instant)>>,
    cancelled: Mutex<Vec<Cancelled>>,
    /// holder, instant the run's future ended (returned or was dropped).
    stopped: Mutex<Vec<(String, Instant)>>,
    /// wall time of each run start, by holder.
    started_wall: Mutex<Vec<(String, DateTime<Utc>)>>,
}

impl HoldLog {
    fn start_of(&self, holder: &str) -> Option<Instant> {
        self.started
            .lock()
            .unwrap()
            .iter()
            .find(|(h, _)| h == holder)
            .map(|(_, t)| *t)
    }
}

/// Records when the run's future ends, whether it returned or was dropped.
struct OnStop(Arc<HoldLog>, String);

impl Drop for OnStop {
    fn drop(&mut self) {
        self.0.stopped.lock().unwrap().push((self.1.clone(), Instant::now()));
    }
}

/// A job that holds its lease until cancelled, recording everything.
fn hold_job(key: &str, lease: Duration, log: Arc<HoldLog>) -> BenchJob {
    let settings = JobSettings::new(Schedule::Manual)
        .lease(lease)
        .grace(Duration::from_millis(300));
    bench_job("handover", key.to_owned(), settings, move |guard: FenceGuard| {
        let log = log.clone();
        async move {
            let holder = guard.holder().to_owned();
            let _stop = OnStop(log.clone(), holder.clone());
            log.started.lock().unwrap().push((holder.clone(), Instant::now()));
            log.started_wall.lock().unwrap().push((holder.clone(), Utc::now()));
            // A separate task observes the cancellation: the runtime may drop this future
            // (no grace after a deadline) before it is polled again.
            let watcher = guard.clone();
            let log2 = log.clone();
            tokio::spawn(async move {
                watcher.cancelled().await;
                let now = (Instant::now(), Utc::now());
                log2.cancelled
                    .lock()
                    .unwrap()
                    .push((holder, now.0, now.1, watcher.reason(), watcher.expires_at()));
            });
            guard.cancelled().await;
            Err("cancelled".into())
        }
    })
}

async fn handover(b: &Bench) {
    progress("5. handover");
    let (db, _) = fresh_db(&b.server).await;
    let trials = if b.smoke { 3 } else { 20 };
    let lease = Duration::from_secs(1);
    let poll = Duration::from_millis(100);
    let mut graceful = Vec::new();
    let mut crash = Vec::new();
    let mut margin_cancel = Vec::new();
    let mut margin_stop = Vec::new();
    let mut margin_expiry = Vec::new();
    let mut after_expiry = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = 0;
    for i in 0..trials {
        if i % 5 == 0 {
            progress(&format!("   trial {i}"));
        }
        // Graceful: the holder shuts down; the other runtime runs the job next.
        {
            let key = format!("hg-{i}");
            let log = Arc::new(HoldLog::default());
            let (a, bh) = (format!("hg{i}-a"), format!("hg{i}-b"));
            let rt_a = runtime(
                db.pool_with(2).await,
                &a,
                Some(poll),
                vec![hold_job(&key, lease, log.clone())],
            )
            .await;
            rt_a.trigger(&key).await.expect("trigger");
            if wait_for(Duration::from_secs(5), || log.start_of(&a)).await.is_none() {
                failures += 1;
                rt_a.shutdown().await;
                continue;
            }
            let rt_b = runtime(
                db.pool_with(2).await,
                &bh,
                Some(poll),
                vec![hold_job(&key, lease, log.clone())],
            )
            .await;
            tokio::time::sleep(Duration::from_millis(150 + 20 * (i as u64 % 5))).await;
            let t0 = Instant::now();
            rt_a.shutdown().await;
            match wait_for(Duration::from_secs(5), || log.start_of(&bh)).await {
                Some(tb) => graceful.push(tb - t0),
                None => failures += 1,
            }
            rt_b.shutdown().await;
        }
        // Crash: the holder is cut off (no renewal, no release); the other takes over after expiry.
        {
            let key = format!("hc-{i}");
            let log = Arc::new(HoldLog::default());
            let (a, bh) = (format!("hc{i}-a"), format!("hc{i}-b"));
            let rt_a = runtime(
                db.pool_with(2).await,
                &a,
                Some(poll),
                vec![hold_job(&key, lease, log.clone())],
            )
            .await;
            rt_a.trigger(&key).await.expect("trigger");
            if wait_for(Duration::from_secs(5), || log.start_of(&a)).await.is_none() {
                failures += 1;
                rt_a.shutdown().await;
                continue;
            }
            let rt_b = runtime(
                db.pool_with(2).await,
                &bh,
                Some(poll),
                vec![hold_job(&key, lease, log.clone())],
            )
            .await;
            // Cut off at a different phase of the heartbeat each trial.
            tokio::time::sleep(Duration::from_millis(150 + (i as u64 * 67) % 333)).await;
            let t0 = Instant::now();
            rt_a.faults().partition(true);
            let tb = wait_for(Duration::from_secs(5), || log.start_of(&bh)).await;
            // Give the watcher task a moment in case it has not recorded yet.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let cancelled = log.cancelled.lock().unwrap().iter().find(|c| c.0 == a).cloned();
            let stopped = log.stopped.lock().unwrap().iter().find(|s| s.0 == a).map(|s| s.1);
            let b_wall = log.started_wall.lock().unwrap().iter().find(|s| s.0 == bh).map(|s| s.1);
            match (tb, cancelled, stopped, b_wall) {
                (Some(tb), Some((_, tc, tc_wall, reason, expiry)), Some(ts), Some(b_wall)) => {
                    crash.push(tb - t0);
                    let signed = |later: Instant, earlier: Instant| {
                        later.saturating_duration_since(earlier).as_secs_f64()
                            - earlier.saturating_duration_since(later).as_secs_f64()
                    };
                    margin_cancel.push(signed(tb, tc));
                    margin_stop.push(signed(tb, ts));
                    margin_expiry.push((expiry - tc_wall).num_microseconds().unwrap_or(0) as f64 / 1e6);
                    after_expiry.push((b_wall - expiry).num_microseconds().unwrap_or(0) as f64 / 1e6);
                    *reasons
                        .entry(reason.map_or("none".into(), |r| r.to_string()))
                        .or_default() += 1;
                }
                _ => {
                    failures += 1;
                    eprintln!("   crash trial {i}: incomplete (takeover {tb:?})");
                }
            }
            rt_a.shutdown().await;
            rt_b.shutdown().await;
        }
    }
    let min_f = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let max_f = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let secs_ms = |s: f64| format!("{:.1} ms", s * 1000.0);
    for (name, v) in [
        ("cancellation observed → takeover run", &margin_cancel),
        ("run stopped → takeover run", &margin_stop),
        ("cancellation observed → server expiry", &margin_expiry),
    ] {
        if v.iter().any(|&m| m <= 0.0) {
            b.violation(format!(
                "handover: margin {name} not positive: min {:.1} ms",
                min_f(v) * 1000.0
            ));
        }
    }
    println!("## 5. Handover: lease 1 s (heartbeat 333 ms, margin 100 ms), poll interval 100 ms\n");
    println!(
        "{trials} trials, each one graceful handover then one crash, each with two fresh runtimes on their own pools \
         of 2. Graceful: from `shutdown()` of the holder to the other runtime's run start. Crash: \
         `faults().partition(true)` on the holder (it stops renewing and never releases; its run is stopped at its \
         local deadline) at a different heartbeat phase each trial, to the other runtime's run start; expected ≤ \
         lease + poll interval = 1.1 s. {}\n",
        if failures > 0 {
            format!("**{failures} trial(s) did not complete and are left out.**")
        } else {
            String::new()
        }
    );
    let mut rows = Vec::new();
    for (name, v, bound) in [
        (
            "graceful: shutdown → next run",
            &graceful,
            "≈ poll interval (100 ms) + shutdown",
        ),
        ("crash: partition → takeover run", &crash, "≤ lease + poll = 1.1 s"),
    ] {
        let (p50, p99) = p50_p99(v);
        rows.push(vec![
            name.into(),
            v.len().to_string(),
            ms(p50),
            ms(p99),
            ms(v.iter().min().copied().unwrap_or_default()),
            ms(v.iter().max().copied().unwrap_or_default()),
            bound.into(),
        ]);
    }
    table(&["handover", "trials", "p50", "p99", "min", "max", "expected"], &rows);
    println!(
        "Stalled holder (the crash trials): its safety margin before anyone else runs the job; must be > 0 every time.\n"
    );
    let mut rows = Vec::new();
    for (name, v) in [
        (
            "cancellation observed (`guard.cancelled()`) → takeover run starts",
            &margin_cancel,
        ),
        (
            "holder's run future ended (dropped) → takeover run starts",
            &margin_stop,
        ),
        (
            "cancellation observed → lease expiry on the server clock",
            &margin_expiry,
        ),
        ("lease expiry on the server → takeover run starts", &after_expiry),
    ] {
        rows.push(vec![
            name.into(),
            v.len().to_string(),
            secs_ms(min_f(v)),
            secs_ms(median_f64(v)),
            secs_ms(max_f(v)),
        ]);
    }
    table(&["interval", "trials", "min", "median", "max"], &rows);
    println!(
        "Cancel reasons seen by the stalled holders: {}.\n",
        reasons
            .iter()
            .map(|(r, n)| format!("{r} × {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    drop_db(&b.server, db).await;
}
