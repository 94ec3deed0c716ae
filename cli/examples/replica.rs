//! A demo replica to try the `leasehold` CLI on: it runs four jobs under
//! leasehold against `DATABASE_URL` until Ctrl-C (or for N seconds).
//!
//! ```sh
//! DATABASE_URL=postgres://user@localhost/app cargo run -p leasehold-cli --example replica -- web-1 120
//! ```
//!
//! - `reindex` (manual, triggered at start) makes a fenced write every 2 s
//!   until it is cancelled or a write is rejected: run
//!   `leasehold revoke reindex --force` to watch it stop;
//! - `billing:acme` runs every 30 s for about 5 s;
//! - `invoices:acme` runs every 20 s; every other run fails (the ledger
//!   answers 503) and is retried a second later, for `leasehold history`;
//! - `nightly-reconcile` is due at 03:00 UTC and idles until then.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use leasehold::{FenceGuard, FencedJob, JobError, JobSettings, Runtime, Schedule};
use sqlx::PgPool;

struct Reindex {
    db: PgPool,
}

impl FencedJob for Reindex {
    fn name(&self) -> &str {
        "reindex"
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual).lease(Duration::from_secs(30))
    }

    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        println!("reindex: run started with fence {}", guard.fence());
        loop {
            match guard.begin_fenced(&self.db).await {
                Ok(tx) => {
                    tx.commit().await?;
                    println!("reindex: fenced write ok (fence {})", guard.fence());
                }
                Err(e) => {
                    println!("reindex: fenced write rejected: {e}");
                    return Err(e.into());
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                _ = guard.cancelled() => {
                    println!("reindex: run with fence {} cancelled ({:?})", guard.fence(), guard.reason());
                    // Stopped, not done: `Err` (the history records the run
                    // as cancelled, with the reason), except for shutdown.
                    guard.check()?;
                    return Ok(());
                }
            }
        }
    }
}

struct Billing {
    db: PgPool,
}

impl FencedJob for Billing {
    fn name(&self) -> &str {
        "billing"
    }

    fn key(&self) -> String {
        "billing:acme".to_owned()
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::every(Duration::from_secs(30))).lease(Duration::from_secs(30))
    }

    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        guard.begin_fenced(&self.db).await?.commit().await?;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = guard.cancelled() => {}
        }
        Ok(())
    }
}

#[derive(Default)]
struct Invoices {
    runs: AtomicU32,
}

impl FencedJob for Invoices {
    fn name(&self) -> &str {
        "invoices"
    }

    fn key(&self) -> String {
        "invoices:acme".to_owned()
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::every(Duration::from_secs(20))).lease(Duration::from_secs(30))
    }

    async fn run(&self, guard: FenceGuard) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if self.runs.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
            return Err(format!(
                "posting invoice batch for acme with fence {}: the ledger answered 503 Service Unavailable \
                 (upstream connect error or disconnect/reset before headers); retry later",
                guard.fence()
            )
            .into());
        }
        Ok(())
    }
}

struct Nightly;

impl FencedJob for Nightly {
    fn name(&self) -> &str {
        "nightly-reconcile"
    }

    fn settings(&self) -> JobSettings {
        let cron = Schedule::cron("0 3 * * *").unwrap_or(Schedule::Manual);
        JobSettings::new(cron).lease(Duration::from_secs(60))
    }

    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let holder = args.next().unwrap_or_else(|| "demo-replica".to_owned());
    let seconds: Option<u64> = args.next().map(|s| s.parse()).transpose()?;
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?;
    let db = PgPool::connect(&url).await?;
    let runtime = Runtime::builder(db.clone())
        .holder(holder.as_str())
        .register(Reindex { db: db.clone() })
        .register(Billing { db: db.clone() })
        .register(Invoices::default())
        .register(Nightly)
        .start()
        .await?;
    runtime.trigger("reindex").await?;
    println!("replica {holder} running; Ctrl-C to stop");
    match seconds {
        Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
        None => tokio::signal::ctrl_c().await?,
    }
    let report = runtime.shutdown().await;
    println!("replica {holder} stopped: {report:?}");
    Ok(())
}
