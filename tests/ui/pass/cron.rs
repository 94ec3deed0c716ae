//! The README example: a cron job with an explicit key and lease, whose
//! `run` returns `sqlx::Error`.
use std::time::Duration;

use leasehold::{FenceGuard, FencedJob, Schedule};

#[derive(FencedJob)]
#[job(key = "nightly-reconcile", cron = "0 3 * * *", lease = "60s")]
struct NightlyReconcile {
    db: sqlx::PgPool,
}

impl NightlyReconcile {
    async fn run(&self, guard: FenceGuard) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE ledger SET reconciled = true WHERE fence <= $1")
            .bind(guard.fence())
            .execute(&self.db)
            .await?;
        Ok(())
    }
}

/// Six fields (seconds first) and nicknames are accepted, as by
/// `Schedule::cron`.
#[derive(FencedJob)]
#[job(cron = "*/30 * * * * *")]
struct EveryHalfMinute;

impl EveryHalfMinute {
    async fn run(&self, _guard: FenceGuard) -> Result<(), leasehold::JobError> {
        Ok(())
    }
}

#[derive(FencedJob)]
#[job(cron = "@daily")]
struct Daily;

impl Daily {
    async fn run(&self, _guard: FenceGuard) -> Result<(), leasehold::JobError> {
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let job = NightlyReconcile {
        db: sqlx::PgPool::connect_lazy("postgres://localhost/unused").unwrap(),
    };
    assert_eq!(job.name(), "nightly_reconcile");
    assert_eq!(job.key(), "nightly-reconcile");
    let settings = job.settings();
    assert!(matches!(settings.get_schedule(), Schedule::Cron(_)));
    assert_eq!(settings.get_heartbeat(), Duration::from_secs(20));

    assert!(matches!(EveryHalfMinute.settings().get_schedule(), Schedule::Cron(_)));
    assert!(matches!(Daily.settings().get_schedule(), Schedule::Cron(_)));
}
