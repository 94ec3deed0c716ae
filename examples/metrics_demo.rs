//! Metrics demo: three replicas in one process, one of them serving every
//! leasehold metric for Prometheus, and the events the dashboard and the
//! alerts are about — a heartbeat error, a lease loss, a stale write
//! refused by its fence, failed and panicking runs.
//!
//! ```sh
//! cargo run --example metrics_demo                      # serves on 127.0.0.1:9464, runs ~1 minute
//! cargo run --example metrics_demo -- --addr 127.0.0.1:9500 --seconds 300
//! curl -s http://127.0.0.1:9464/metrics | grep ^leasehold_
//! ```
//!
//! It starts a throwaway PostgreSQL unless `DATABASE_URL` is set, like the
//! tests. `scripts/check-prometheus.sh` scrapes it with a real Prometheus and
//! evaluates every query of `grafana/` against it.
//!
//! The `metrics` recorder is process-wide, so only one runtime calls
//! `.prometheus(..)`; the others' metrics are served there too (a second
//! call fails, as shown). The jobs:
//! - `tick` every second: a short run that appends to a ledger inside a
//!   fenced transaction;
//! - `flaky` every two seconds: fails on its first run, panics on its
//!   second, then mostly succeeds (every fifth run fails);
//! - `billing`, triggered once: a long run of fenced steps;
//! - `stuck` every 5 seconds: a call that never returns, cancelled at its
//!   1 s time limit (`timeout`) and dropped after its grace;
//! - `flaky` is limited to one run at once across the fleet
//!   (`Controls::set_limit`), so the fleet-wide limit's metrics have series.
//!
//! The scenario: the `billing` lease row is locked for 1.6 s, so a
//! heartbeat cannot renew it (outcome `busy`: leasehold skips locked rows
//! rather than wait for them); then the
//! replica running `billing` is cut off from the database: it stops its
//! run at its local deadline (a lease loss, reason `deadline`), another
//! replica takes over under a newer fence, and a late write with the old
//! guard is refused (a fence rejection). Then it keeps running for
//! `--seconds` (default 60), or until SIGINT/SIGTERM, and shuts down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    Error, FenceGuard, FencedJob, JobError, JobKind, JobSettings, NewKey, Runtime, Schedule, store::LeaseStore,
};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Failure = Box<dyn std::error::Error>;

/// A short run every second, one ledger row per slot.
/// A job kind: its keys are stored for the fleet (one here), so the stored
/// keys' gauges (bad arguments, unknown kinds) have series.
struct Tenant;

#[derive(serde::Serialize, serde::Deserialize)]
struct TenantArgs {
    id: i64,
}

impl JobKind for Tenant {
    type Args = TenantArgs;
    fn name(&self) -> &str {
        "tenant"
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual).lease(Duration::from_secs(3))
    }
    async fn run(&self, _args: TenantArgs, _guard: FenceGuard) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

struct Tick {
    db: PgPool,
}

impl FencedJob for Tick {
    fn name(&self) -> &str {
        "tick"
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::every(Duration::from_secs(1))).lease(Duration::from_secs(3))
    }
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut tx = guard.begin_fenced(&self.db).await?;
        sqlx::query("INSERT INTO ledger (fence, holder) VALUES ($1, $2)")
            .bind(guard.fence())
            .bind(guard.holder())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Fails, then panics, then mostly succeeds. The attempt count is shared by
/// the three replicas' instances of the job.
struct Flaky {
    attempts: Arc<AtomicUsize>,
}

impl FencedJob for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::every(Duration::from_secs(2)))
            .lease(Duration::from_secs(3))
            .retry(Duration::from_millis(200), Duration::from_secs(1))
    }
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
        match attempt {
            2 => panic!("flaky: a bug on attempt 2 (the runtime contains it and retries)"),
            n if n % 5 == 1 => Err(format!("flaky: downstream refused attempt {n}").into()),
            _ => Ok(()),
        }
    }
}

/// A run stuck on a call that never returns, and that ignores its
/// cancellation: stopped at its time limit, dropped after its grace.
struct Stuck;

impl FencedJob for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::every(Duration::from_secs(5)))
            .lease(Duration::from_secs(3))
            .timeout(Duration::from_secs(1))
            .grace(Duration::from_millis(200))
    }
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        std::future::pending::<()>().await;
        Ok(())
    }
}

/// A long run of fenced steps, until it is cancelled.
struct Billing {
    db: PgPool,
    guards: Guards,
}

impl FencedJob for Billing {
    fn name(&self) -> &str {
        "billing"
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual)
            .lease(Duration::from_secs(3))
            .grace(Duration::from_millis(500))
    }
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        self.guards.push(&guard);
        for step in 1_i64.. {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = guard.cancelled() => return Err("billing: cancelled".into()),
            }
            guard
                .update("invoice_batch")
                .set("step", step)
                .filter("id", 1_i32)
                .execute(&self.db)
                .await?;
        }
        Ok(())
    }
}

/// Every `billing` guard handed out, newest last.
#[derive(Clone, Default)]
struct Guards(Arc<Mutex<Vec<FenceGuard>>>);

impl Guards {
    fn push(&self, guard: &FenceGuard) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(guard.clone());
    }

    /// The guard of the `billing` run in progress, if any.
    fn running(&self) -> Option<FenceGuard> {
        let guards = self.0.lock().unwrap_or_else(|p| p.into_inner());
        guards.iter().rev().find(|g| !g.is_cancelled()).cloned()
    }

    /// Waits (up to `within`) for a running guard that `accept` likes.
    async fn wait_for(&self, within: Duration, accept: impl Fn(&FenceGuard) -> bool) -> Result<FenceGuard, Failure> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(guard) = self.running().filter(|g| accept(g)) {
                return Ok(guard);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("no billing run as expected within {within:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

struct Args {
    addr: String,
    seconds: u64,
}

fn args() -> Result<Args, Failure> {
    let mut args = Args {
        addr: "127.0.0.1:9464".to_owned(),
        seconds: 60,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--addr" => args.addr = it.next().ok_or("--addr needs a value, e.g. 127.0.0.1:9464")?,
            "--seconds" => {
                let value = it.next().ok_or("--seconds needs a value")?;
                args.seconds = value
                    .parse()
                    .map_err(|_| format!("--seconds {value:?}: not a number"))?;
            }
            "-h" | "--help" => {
                println!("usage: metrics_demo [--addr 127.0.0.1:9464] [--seconds 60]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    Ok(args)
}

/// GETs the metrics page, as Prometheus would.
async fn scrape(addr: &str) -> Result<String, Failure> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("metrics endpoint answered {head:?}").into());
    }
    Ok(body.to_owned())
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[tokio::main]
async fn main() -> Result<(), Failure> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "leasehold=warn".into()),
        )
        .with_target(false)
        .init();
    let args = args()?;

    let db = leasehold_testkit::test_db().await;
    sqlx::raw_sql(
        "CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, fence BIGINT NOT NULL, holder TEXT NOT NULL);
         CREATE TABLE invoice_batch (id INT PRIMARY KEY, step BIGINT NOT NULL, last_fence BIGINT NOT NULL DEFAULT 0);
         INSERT INTO invoice_batch (id, step) VALUES (1, 0);",
    )
    .execute(&db.pool)
    .await?;

    let attempts = Arc::new(AtomicUsize::new(0));
    let guards = Guards::default();
    let mut replicas = Vec::new();
    for (i, name) in ["replica-a", "replica-b", "replica-c"].into_iter().enumerate() {
        // A lock wait longer than 500 ms fails the statement, so claims and
        // releases that meet the locked row fail fast (heartbeats skip it).
        let options = db.options.clone().options([("lock_timeout", "500ms")]);
        let pool = PgPoolOptions::new()
            .max_connections(3)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await?;
        let mut builder = Runtime::builder(pool.clone())
            .holder(name)
            .poll_interval(Duration::from_millis(500))
            .register(Tick { db: pool.clone() })
            .register_kind(Tenant)
            .register(Flaky {
                attempts: attempts.clone(),
            })
            .register(Stuck)
            .register(Billing {
                db: pool.clone(),
                guards: guards.clone(),
            });
        if i == 0 {
            builder = builder.prometheus(args.addr.as_str());
        }
        replicas.push(builder.start().await?);
    }
    let tenant = NewKey::new("tenant", "tenant:1", &TenantArgs { id: 1 }, "every 2s".parse()?)?;
    replicas[0].store().keys().add(&[tenant]).await?;
    println!(
        "metrics_demo: 3 replicas started; metrics on http://{}/metrics",
        args.addr
    );
    match Runtime::builder(db.pool.clone())
        .prometheus("127.0.0.1:9")
        .start()
        .await
    {
        Err(e @ Error::Metrics { .. }) => println!("metrics_demo: a second exporter is refused: {e}"),
        other => return Err(format!("a second exporter should be refused, got {other:?}").into()),
    }

    // A fleet-wide limit of one run at once on `flaky`: its wait histogram,
    // its gauge and the held-back gauge get series.
    replicas[0]
        .store()
        .controls()
        .set_limit("flaky", 1, "metrics_demo")
        .await?;

    replicas[0].trigger("billing").await?;
    let first = guards.wait_for(Duration::from_secs(10), |_| true).await?;
    println!(
        "metrics_demo: billing runs on {} (fence {})",
        first.holder(),
        first.fence()
    );

    // 1. A heartbeat that cannot renew: the lease row is locked elsewhere.
    let tx = LeaseStore::new(db.pool.clone()).lock_row_for_test("billing").await?;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    tx.rollback().await?;
    println!(
        "metrics_demo: the billing lease row was locked for 1.6 s: heartbeats of {} could not renew it (busy)",
        first.holder()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 2. A lease loss (deadline), a takeover, and a stale write refused.
    let stale = guards.wait_for(Duration::from_secs(10), |_| true).await?;
    let victim = replicas
        .iter()
        .find(|r| r.holder() == stale.holder())
        .ok_or("the billing holder is not one of the replicas")?;
    victim.faults().partition(true);
    println!(
        "metrics_demo: {} (billing, fence {}) is cut off from the database",
        stale.holder(),
        stale.fence()
    );
    tokio::time::timeout(Duration::from_secs(10), stale.cancelled()).await?;
    println!("metrics_demo: {} stopped its run: {:?}", stale.holder(), stale.reason());
    let newer = guards
        .wait_for(Duration::from_secs(15), |g| g.fence() > stale.fence())
        .await?;
    println!(
        "metrics_demo: {} took billing over with fence {}",
        newer.holder(),
        newer.fence()
    );
    tokio::time::sleep(Duration::from_millis(800)).await; // its first fenced steps
    victim.faults().partition(false);
    match stale
        .update("invoice_batch")
        .set("step", -1_i64)
        .filter("id", 1_i32)
        .execute(&db.pool)
        .await
    {
        Err(e @ Error::StaleFence { .. }) => println!("metrics_demo: the late write was refused: {e}"),
        other => return Err(format!("the stale write should have been refused, got {other:?}").into()),
    }

    // What Prometheus sees now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let page = scrape(&args.addr).await?;
    let value = |series: &str| {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
    };
    let mut missing = Vec::new();
    for histogram in ["leasehold_job_duration_seconds", "leasehold_heartbeat_duration_seconds"] {
        if !page.contains(&format!("# TYPE {histogram} histogram")) {
            missing.push(format!("{histogram} as a histogram"));
        }
    }
    for series in [
        "leasehold_lease_lost_total{job_name=\"billing\",reason=\"deadline\"}",
        "leasehold_fence_rejections_total{job_name=\"billing\"}",
        "leasehold_heartbeats_total{outcome=\"busy\"}",
        "leasehold_job_runs_total{job_name=\"flaky\",outcome=\"failed\"}",
        "leasehold_job_runs_total{job_name=\"flaky\",outcome=\"panicked\"}",
        "leasehold_job_runs_total{job_name=\"billing\",outcome=\"cancelled\"}",
        "leasehold_job_last_success_timestamp_seconds{job_name=\"tick\"}",
    ] {
        if !value(series).is_some_and(|v| v >= 1.0) {
            missing.push(format!("{series} >= 1"));
        }
    }
    for line in page.lines().filter(|l| {
        l.starts_with("leasehold_lease_lost_total")
            || l.starts_with("leasehold_fence_rejections_total")
            || l.starts_with("leasehold_heartbeats_total")
            || l.starts_with("leasehold_job_runs_total")
            || l.starts_with("leasehold_leases_held")
    }) {
        println!("    {line}");
    }
    if !missing.is_empty() {
        return Err(format!("the metrics page lacks {missing:?}").into());
    }
    println!(
        "metrics_demo: scenario done; running {} s more (Ctrl-C to stop)",
        args.seconds
    );

    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(args.seconds)) => {}
        _ = stop_signal() => println!("metrics_demo: stopping"),
    }
    for runtime in replicas {
        runtime.shutdown().await;
    }
    println!("metrics_demo: stopped");
    Ok(())
}
