//! Quickstart: three replicas of a service in one process, two jobs, one
//! lease loss, and a stale write that is rejected.
//!
//! ```sh
//! cargo run --example quickstart          # starts a throwaway PostgreSQL
//! DATABASE_URL=postgres://... cargo run --example quickstart
//! ```
//!
//! What happens, in about 20 seconds:
//! - `reconcile` runs every 2 s, once per slot across the three replicas,
//!   appending to a ledger inside a fenced transaction;
//! - `billing` is a long job that updates an invoice batch in fenced steps;
//! - at 6 s the replica running `billing` is cut off from the database (a
//!   simulated partition): it stops its run at its local deadline, before
//!   the lease can expire, and another replica takes over with a higher
//!   fence;
//! - the cut-off replica then "wakes up" and tries one more write with its
//!   old guard: the database rejects it (`StaleFence`) and nothing changes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{Error, FenceGuard, FencedJob, JobError, Runtime};
use sqlx::PgPool;

/// Appends one ledger row per slot, fenced on the job's key.
#[derive(FencedJob)]
#[job(every = "2s", lease = "3s")]
struct Reconcile {
    db: PgPool,
    stats: Stats,
}

impl Reconcile {
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        self.stats.started(&guard);
        let mut tx = guard.begin_fenced(&self.db).await?; // a stale fence writes nothing
        sqlx::query("INSERT INTO ledger (fence, holder) VALUES ($1, $2)")
            .bind(guard.fence())
            .bind(guard.holder())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// A long job: fenced steps on one invoice batch until it is done or loses
/// its lease.
#[derive(FencedJob)]
#[job(every = "30s", lease = "3s")]
struct Billing {
    db: PgPool,
    stats: Stats,
}

impl Billing {
    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        self.stats.started(&guard);
        for step in 1..=40_i64 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = guard.cancelled() => return Err("cancelled".into()),
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

/// What each replica did, for the summary.
#[derive(Clone, Default)]
struct Stats(Arc<Mutex<Stat>>);

#[derive(Default)]
struct Stat {
    runs: BTreeMap<(String, String), Vec<i64>>,
    guards: Vec<FenceGuard>,
}

impl Stats {
    fn started(&self, guard: &FenceGuard) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.runs
            .entry((guard.holder().to_owned(), guard.job().to_owned()))
            .or_default()
            .push(guard.fence());
        s.guards.push(guard.clone());
    }

    /// The guard of the latest `billing` run of `holder`.
    fn billing_guard(&self, holder: &str) -> Option<FenceGuard> {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.guards
            .iter()
            .rev()
            .find(|g| g.holder() == holder && g.job() == "billing")
            .cloned()
    }

    /// Who runs `billing` right now.
    fn billing_holder(&self) -> Option<String> {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.guards
            .iter()
            .rev()
            .find(|g| g.job() == "billing" && !g.is_cancelled())
            .map(|g| g.holder().to_owned())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "leasehold=warn".into()),
        )
        .with_target(false)
        .init();

    match std::env::var("DATABASE_URL") {
        Ok(_) => println!("using DATABASE_URL (a fresh database is created on that server)"),
        Err(_) => println!("DATABASE_URL is unset: starting a throwaway PostgreSQL"),
    }
    let db = leasehold_testkit::test_db().await;
    sqlx::raw_sql(
        "CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, fence BIGINT NOT NULL, holder TEXT NOT NULL);
         CREATE TABLE invoice_batch (id INT PRIMARY KEY, step BIGINT NOT NULL, last_fence BIGINT NOT NULL DEFAULT 0);
         INSERT INTO invoice_batch (id, step) VALUES (1, 0);",
    )
    .execute(&db.pool)
    .await?;

    let stats = Stats::default();
    let mut replicas = Vec::new();
    for name in ["replica-a", "replica-b", "replica-c"] {
        // Each replica has its own small pool, as in a real deployment.
        let pool = db.pool_with(2).await;
        let runtime = Runtime::builder(pool.clone())
            .holder(name)
            .poll_interval(Duration::from_millis(500))
            .register(Reconcile {
                db: pool.clone(),
                stats: stats.clone(),
            })
            .register(Billing {
                db: pool.clone(),
                stats: stats.clone(),
            })
            .start()
            .await?;
        replicas.push(runtime);
    }
    println!("3 replicas started; reconcile every 2 s, billing as a long job");
    replicas[0].trigger("billing").await?;

    tokio::time::sleep(Duration::from_secs(6)).await;
    let victim = stats.billing_holder().ok_or("billing is not running")?;
    let stale = stats.billing_guard(&victim).ok_or("no billing guard")?;
    let victim_rt = replicas
        .iter()
        .find(|r| r.holder() == victim)
        .ok_or("unknown replica")?;
    println!(
        "t=6s  {victim} (billing, fence {}) is cut off from the database",
        stale.fence()
    );
    victim_rt.faults().partition(true);

    stale.cancelled().await;
    println!(
        "      {victim} stopped its run: {:?} (local deadline, before the lease expired)",
        stale.reason()
    );
    let takeover = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(holder) = stats.billing_holder().filter(|h| *h != victim) {
            break holder;
        }
    };
    let newer = stats.billing_guard(&takeover).ok_or("no takeover guard")?;
    println!("      {takeover} took billing over with fence {}", newer.fence());
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The partitioned replica wakes up and tries one more write.
    victim_rt.faults().partition(false);
    let late = stale
        .update("invoice_batch")
        .set("step", -1_i64)
        .filter("id", 1_i32)
        .execute(&db.pool)
        .await;
    let rejections = match late {
        Err(e @ Error::StaleFence { .. }) => {
            println!(
                "      {victim}'s late write with fence {} was rejected: {e}",
                stale.fence()
            );
            1
        }
        other => return Err(format!("the stale write should have been rejected, got {other:?}").into()),
    };

    tokio::time::sleep(Duration::from_secs(10)).await;
    for runtime in replicas {
        runtime.shutdown().await;
    }

    let (step, last_fence): (i64, i64) = sqlx::query_as("SELECT step, last_fence FROM invoice_batch WHERE id = 1")
        .fetch_one(&db.pool)
        .await?;
    let ledger: Vec<(i64, String)> = sqlx::query_as("SELECT fence, holder FROM ledger ORDER BY id")
        .fetch_all(&db.pool)
        .await?;
    println!();
    println!("{:<10} {:<10} {:>5}  fences", "replica", "job", "runs");
    let s = stats.0.lock().unwrap_or_else(|p| p.into_inner());
    for ((holder, job), fences) in &s.runs {
        let list: Vec<String> = fences.iter().map(|f| f.to_string()).collect();
        println!("{holder:<10} {job:<10} {:>5}  {}", fences.len(), list.join(" "));
    }
    println!();
    println!(
        "ledger rows: {} (one per reconcile slot), fences increasing: {}",
        ledger.len(),
        ledger.windows(2).all(|w| w[0].0 < w[1].0)
    );
    println!("invoice batch: step {step} written under fence {last_fence} (the takeover's, never the stale one's)");
    println!("stale writes rejected: {rejections}");
    if step < 0 || last_fence < newer.fence() {
        return Err("a stale write landed".into());
    }
    Ok(())
}
