//! What every scenario shares: the [`Bench`] context, a fresh database per
//! scenario, the jobs the runtimes run, and starting a runtime.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use leasehold::{FenceGuard, FencedJob, JobError, JobSettings, Runtime, Schedule};
use leasehold_testkit::{TestDb, create_db};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgPool};

/// What every scenario needs.
pub(crate) struct Bench {
    pub(crate) smoke: bool,
    pub(crate) server: PgConnectOptions,
    /// Set when a safety invariant was violated: the process exits 1.
    pub(crate) violated: AtomicBool,
    /// `--max-keys N`: the idle scenario skips fleets of more keys.
    pub(crate) max_keys: Option<usize>,
    /// Whether other scenarios run in this process before the memory one.
    pub(crate) alone: bool,
}

impl Bench {
    pub(crate) fn violation(&self, what: String) {
        println!("\n**SAFETY VIOLATION**: {what}\n");
        self.violated.store(true, Ordering::SeqCst);
    }
}

/// A fresh database with leasehold's schema and `pg_stat_statements`.
pub(crate) async fn fresh_db(server: &PgConnectOptions) -> (TestDb, bool) {
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
pub(crate) async fn drop_db(server: &PgConnectOptions, db: TestDb) {
    db.pool.close().await;
    if let Ok(mut admin) = server.connect().await {
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", db.name);
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await;
    }
}

/// Polls `check` every 2 ms until it returns `Some`, or `None` after `within`.
pub(crate) async fn wait_for<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
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

type Body = Arc<dyn Fn(FenceGuard) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

/// A job whose body is a closure, so each scenario scripts its behaviour.
#[derive(Clone)]
pub(crate) struct BenchJob {
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

pub(crate) fn bench_job<F, Fut>(name: &str, key: String, settings: JobSettings, body: F) -> BenchJob
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
pub(crate) async fn runtime<J: FencedJob>(pool: PgPool, holder: &str, poll: Option<Duration>, jobs: Vec<J>) -> Runtime {
    runtime_timed(pool, holder, poll, jobs).await.0
}

/// [`runtime`], and how long its `start()` took (registering the jobs with
/// the builder is not included).
pub(crate) async fn runtime_timed<J: FencedJob>(
    pool: PgPool,
    holder: &str,
    poll: Option<Duration>,
    jobs: Vec<J>,
) -> (Runtime, Duration) {
    let mut builder = Runtime::builder(pool).holder(holder);
    if let Some(poll) = poll {
        builder = builder.poll_interval(poll);
    }
    for job in jobs {
        builder = builder.register(job);
    }
    let t = Instant::now();
    let runtime = builder.start().await.expect("runtime starts");
    (runtime, t.elapsed())
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
