//! What every scenario shares: the [`Bench`] context, a fresh database per
//! scenario, the fleet-size scenarios' job, and starting a runtime.
//!
//! The rest comes from leasehold-testkit, shared with the tests: databases
//! (`create_db`, `TestDb::drop_database`), the scripted job
//! (`jobs::job`, re-exported here), runtimes (`jobs::builder`), waiting
//! (`wait_for`) and `pg_stat_statements` (`stats`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{FenceGuard, FencedJob, JobError, JobSettings, Runtime, Schedule};
pub(crate) use leasehold_testkit::jobs::{self, ScriptedJob, job};
use leasehold_testkit::stats::statement_stats_available;
pub(crate) use leasehold_testkit::wait_for;
use leasehold_testkit::{TestDb, create_db};
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

/// What every scenario needs.
pub(crate) struct Bench {
    pub(crate) smoke: bool,
    pub(crate) server: PgConnectOptions,
    /// Set when a safety invariant was violated: the process exits 1.
    pub(crate) violated: AtomicBool,
    /// `--max-keys N`: the largest fleet of the fleet-size scenarios. Idle
    /// skips its sizes above N and adds N itself; startup, memory and the
    /// handover at scale use N keys.
    pub(crate) max_keys: Option<usize>,
    /// Whether other scenarios run in this process before the memory one.
    pub(crate) alone: bool,
}

impl Bench {
    /// How many keys startup and memory register: `--max-keys`, else
    /// `default` (100,000 outside smoke runs).
    pub(crate) fn fleet_keys(&self, default: usize) -> usize {
        self.max_keys.unwrap_or(default)
    }

    pub(crate) fn violation(&self, what: String) {
        println!("\n**SAFETY VIOLATION**: {what}\n");
        self.violated.store(true, Ordering::SeqCst);
    }
}

/// A fresh database with leasehold's schema, and whether `pg_stat_statements`
/// works in it.
pub(crate) async fn fresh_db(server: &PgConnectOptions) -> (TestDb, bool) {
    let db = create_db(server).await;
    leasehold::migrate(&db.pool).await.expect("migrate");
    let stats = statement_stats_available(&db.pool).await;
    (db, stats)
}

/// Drops a scenario's database, whatever server it is on (testkit's
/// `TestDb::drop_database`: closes its pool, `DROP DATABASE … WITH (FORCE)`).
pub(crate) async fn drop_db(db: TestDb) {
    let name = db.name.clone();
    if let Err(e) = db.drop_database().await {
        eprintln!("   could not drop database {name}: {e}");
    }
}

/// How often the scenarios check what they wait for ([`wait_for`]): a
/// latency they measure is seen within this.
pub(crate) const POLL: Duration = Duration::from_millis(2);

/// A runtime named `holder` on `pool` with `jobs` (the default poll interval
/// when `poll` is `None`).
pub(crate) async fn runtime<J: FencedJob>(pool: PgPool, holder: &str, poll: Option<Duration>, jobs: Vec<J>) -> Runtime {
    jobs::start(pool, holder, poll, jobs).await
}

/// [`runtime`], and how long its `start()` took (registering the jobs with
/// the builder is not included).
pub(crate) async fn runtime_timed<J: FencedJob>(
    pool: PgPool,
    holder: &str,
    poll: Option<Duration>,
    jobs: Vec<J>,
) -> (Runtime, Duration) {
    let (runtime, took, _) = runtime_timed_cpu(pool, holder, poll, jobs).await;
    (runtime, took)
}

/// [`runtime_timed`], also giving the CPU time this process used during
/// `start()` (every thread: the client's share of the start).
pub(crate) async fn runtime_timed_cpu<J: FencedJob>(
    pool: PgPool,
    holder: &str,
    poll: Option<Duration>,
    jobs: Vec<J>,
) -> (Runtime, Duration, Duration) {
    let builder = jobs::builder(pool, holder, poll, jobs);
    let cpu = crate::stats::process_cpu();
    let t = Instant::now();
    let runtime = builder.start().await.expect("runtime starts");
    let took = t.elapsed();
    (runtime, took, crate::stats::process_cpu().saturating_sub(cpu))
}

/// The period of [`TenantJob`]: one slot a week (slots are aligned on the
/// Unix epoch, so they start on Thursdays at 00:00 UTC).
pub(crate) const TENANT_PERIOD: Duration = Duration::from_secs(7 * 24 * 3600);

/// The job of the fleet-size scenarios (idle, startup, memory): a small
/// struct holding a tenant id, one key per tenant, scheduled every
/// [`TENANT_PERIOD`] so that it is never due while a scenario runs; its body
/// does nothing.
pub(crate) struct TenantJob {
    tenant: u32,
}

impl TenantJob {
    /// `n` jobs, tenants 0 to n − 1.
    pub(crate) fn many(n: usize) -> Vec<TenantJob> {
        (0..n as u32).map(|tenant| TenantJob { tenant }).collect()
    }
}

impl FencedJob for TenantJob {
    fn name(&self) -> &str {
        "tenant-sync"
    }
    fn key(&self) -> String {
        format!("tenant-sync:{}", self.tenant)
    }
    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::every(TENANT_PERIOD))
    }
    async fn run(&self, _guard: FenceGuard) -> Result<(), JobError> {
        Ok(())
    }
}

/// Prints a warning when the tenant jobs' next slot is less than `within`
/// away by this machine's clock (the throwaway server shares it): their keys
/// would then all fall due during the scenario.
pub(crate) fn check_tenant_slot(within: Duration) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let period = TENANT_PERIOD.as_secs();
    let slot_in = Duration::from_secs(period - now.as_secs() % period);
    if slot_in < within {
        println!(
            "**Warning**: the tenant jobs' weekly slot starts in {:.0} min, so their keys may all fall due during \
             this scenario; run it again after that.\n",
            slot_in.as_secs_f64() / 60.0
        );
    }
}
